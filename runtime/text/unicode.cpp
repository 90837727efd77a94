#include "runtime/text/unicode.hpp"

#include <array>
#include <unordered_map>

namespace accord::unicode {

namespace {

struct ByteTable {
  std::array<std::string, 256> to_unicode;
  std::unordered_map<std::uint32_t, int> to_byte;

  ByteTable() {
    // Printable Latin-1 bytes stand for themselves; the others map, in
    // order, to U+0100 and up.
    std::uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const std::uint32_t cp = printable ? static_cast<std::uint32_t>(b) : next++;
      append_utf8(to_unicode[static_cast<std::size_t>(b)], cp);
      to_byte.emplace(cp, b);
    }
  }
};

const ByteTable& byte_table() {
  static const ByteTable table;
  return table;
}

}  // namespace

const std::string& byte_to_unicode(std::uint8_t byte) { return byte_table().to_unicode[byte]; }

int unicode_to_byte(std::uint32_t code_point) {
  const auto& map = byte_table().to_byte;
  const auto it = map.find(code_point);
  return it == map.end() ? -1 : it->second;
}

}  // namespace accord::unicode
