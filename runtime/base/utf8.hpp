// UTF-8 decoding and encoding, for the tokenizers and for error messages
// that quote text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace accord::unicode {

struct CodePoint {
  std::uint32_t value = 0;  // 0xFFFD for a byte that starts no valid sequence
  std::size_t length = 1;   // bytes taken from the text
  bool valid = true;
};

// Decodes the code point at text[at] (at < text.size()). Invalid, overlong
// or truncated sequences give a one-byte, invalid code point.
CodePoint decode_utf8(std::string_view text, std::size_t at);

// Appends the UTF-8 encoding of `value` (<= 0x10FFFF) to `out`.
void append_utf8(std::string& out, std::uint32_t value);

}  // namespace accord::unicode
