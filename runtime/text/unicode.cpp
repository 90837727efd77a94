#include "runtime/text/unicode.hpp"

#include <unicode/uchar.h>

#include <array>
#include <unordered_map>

namespace accord::unicode {

namespace {

enum class CharClass { letter, number, space, other };

CharClass classify(const CodePoint& cp) {
  if (!cp.valid) return CharClass::other;
  const auto c = static_cast<UChar32>(cp.value);
  if (u_isUWhiteSpace(c)) return CharClass::space;
  switch (u_charType(c)) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER: return CharClass::letter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER: return CharClass::number;
    default: return CharClass::other;
  }
}

struct Char {
  std::uint32_t value;
  CharClass cls;
  std::size_t begin;  // byte offset in the text
};

// The GPT-2 matcher over decoded characters; positions past the end read
// as "none", which no class test accepts.
class Gpt2Splitter {
 public:
  Gpt2Splitter(std::string_view text, std::vector<Char> chars) : text_(text), chars_(std::move(chars)) {}

  std::vector<std::string_view> split() {
    std::size_t pos = 0;
    while (pos < chars_.size()) pos = match(pos);
    return words_;
  }

 private:
  static constexpr std::uint32_t kNone = 0xFFFFFFFF;

  std::uint32_t value(std::size_t i) const { return i < chars_.size() ? chars_[i].value : kNone; }
  bool is(std::size_t i, CharClass cls) const { return i < chars_.size() && chars_[i].cls == cls; }
  std::size_t run(std::size_t i, CharClass cls) const {
    while (is(i, cls)) ++i;
    return i;
  }

  std::size_t add(std::size_t begin, std::size_t end) {
    const std::size_t from = chars_[begin].begin;
    const std::size_t to = end < chars_.size() ? chars_[end].begin : text_.size();
    words_.push_back(text_.substr(from, to - from));
    return end;
  }

  std::size_t contraction(std::size_t pos) const {
    if (value(pos) != '\'') return 0;
    const std::uint32_t a = value(pos + 1), b = value(pos + 2);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
  }

  std::size_t match(std::size_t pos) {
    if (const std::size_t n = contraction(pos)) return add(pos, pos + n);
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`
    const std::size_t body = value(pos) == ' ' ? pos + 1 : pos;
    for (CharClass cls : {CharClass::letter, CharClass::number, CharClass::other}) {
      if (is(body, cls)) return add(pos, run(body, cls));
    }
    // `\s+(?!\S)` leaves the last space for the next word; `\s+` takes all.
    const std::size_t end = run(pos, CharClass::space);
    if (end - pos > 1 && end < chars_.size()) return add(pos, end - 1);
    if (end > pos) return add(pos, end);
    return add(pos, pos + 1);
  }

  std::string_view text_;
  std::vector<Char> chars_;
  std::vector<std::string_view> words_;
};

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

std::vector<std::string_view> gpt2_words(std::string_view text) {
  std::vector<Char> chars;
  for (std::size_t at = 0; at < text.size();) {
    const CodePoint cp = decode_utf8(text, at);
    chars.push_back({cp.value, classify(cp), at});
    at += cp.length;
  }
  return Gpt2Splitter(text, std::move(chars)).split();
}

const std::string& byte_to_unicode(std::uint8_t byte) { return byte_table().to_unicode[byte]; }

int unicode_to_byte(std::uint32_t code_point) {
  const auto& map = byte_table().to_byte;
  const auto it = map.find(code_point);
  return it == map.end() ? -1 : it->second;
}

}  // namespace accord::unicode
