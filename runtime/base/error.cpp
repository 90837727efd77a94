#include "runtime/base/error.hpp"

#include <cstdio>

#include "runtime/base/utf8.hpp"

namespace accord {

namespace {

// Newlines and tabs lay a message out (a list of paths tried); every other
// control character can act on the terminal, \r included (it hides what came
// before it on the line).
bool acts_on_terminal(std::uint32_t code_point) {
  if (code_point == '\n' || code_point == '\t') return false;
  return code_point < 0x20 || (code_point >= 0x7F && code_point < 0xA0);
}

void append_escaped(std::string& out, unsigned char byte) {
  char escaped[5];
  std::snprintf(escaped, sizeof escaped, "\\x%02X", byte);
  out += escaped;
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t at = 0; at < text.size();) {
    const unicode::CodePoint c = unicode::decode_utf8(text, at);
    if (c.valid && !acts_on_terminal(c.value)) {
      out.append(text.substr(at, c.length));
    } else {
      for (std::size_t i = 0; i < c.length; ++i) append_escaped(out, static_cast<unsigned char>(text[at + i]));
    }
    at += c.length;
  }
  return out;
}

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::contract: return "contract";
    case ErrorCode::io: return "io";
    case ErrorCode::format: return "format";
    case ErrorCode::architecture: return "architecture";
    case ErrorCode::state: return "state";
    case ErrorCode::prompt_cache: return "prompt_cache";
    case ErrorCode::mechanism: return "mechanism";
    case ErrorCode::commit_aborted: return "commit_aborted";
    case ErrorCode::commit_indeterminate: return "commit_indeterminate";
  }
  return "unknown";
}

}  // namespace accord
