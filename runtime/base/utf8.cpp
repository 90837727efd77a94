#include "runtime/base/utf8.hpp"

#include <utility>

namespace accord::unicode {

namespace {

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Length and value bits of a UTF-8 lead byte; length 0 for an invalid one.
std::pair<std::size_t, std::uint32_t> lead(unsigned char c) {
  if (c < 0x80) return {1, c};
  if ((c & 0xE0) == 0xC0) return {2, c & 0x1Fu};
  if ((c & 0xF0) == 0xE0) return {3, c & 0x0Fu};
  if ((c & 0xF8) == 0xF0) return {4, c & 0x07u};
  return {0, 0};
}

}  // namespace

CodePoint decode_utf8(std::string_view text, std::size_t at) {
  const auto [length, bits] = lead(static_cast<unsigned char>(text[at]));
  CodePoint invalid{0xFFFD, 1, false};
  if (length == 0 || text.size() - at < length) return invalid;
  std::uint32_t value = bits;
  for (std::size_t i = 1; i < length; ++i) {
    const auto c = static_cast<unsigned char>(text[at + i]);
    if (!is_continuation(c)) return invalid;
    value = (value << 6) | (c & 0x3Fu);
  }
  static constexpr std::uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (value < kSmallest[length] || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return invalid;
  return {value, length, true};
}

void append_utf8(std::string& out, std::uint32_t v) {
  auto put = [&](std::uint32_t byte) { out.push_back(static_cast<char>(byte)); };
  if (v < 0x80) {
    put(v);
  } else if (v < 0x800) {
    put(0xC0 | (v >> 6));
    put(0x80 | (v & 0x3F));
  } else if (v < 0x10000) {
    put(0xE0 | (v >> 12));
    put(0x80 | ((v >> 6) & 0x3F));
    put(0x80 | (v & 0x3F));
  } else {
    put(0xF0 | (v >> 18));
    put(0x80 | ((v >> 12) & 0x3F));
    put(0x80 | ((v >> 6) & 0x3F));
    put(0x80 | (v & 0x3F));
  }
}

}  // namespace accord::unicode
