// The Unicode pieces of GPT-2 style byte-level BPE: UTF-8 decoding, the
// GPT-2 pre-tokenizer and the byte <-> printable-character table.
//
// Character classes come from ICU (Debian's libicu): letters are the
// general categories L*, numbers N*, whitespace the White_Space property,
// as in llama.cpp's tables.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

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

// Splits text into the words of GPT-2's pre-tokenizer regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// exactly as llama.cpp's hand-written matcher does. The words are views of
// `text` and together cover it. An invalid byte counts as a character that
// is neither letter, number nor space.
std::vector<std::string_view> gpt2_words(std::string_view text);

// GPT-2's bytes_to_unicode: every byte as one printable character (UTF-8).
const std::string& byte_to_unicode(std::uint8_t byte);
// The byte a character of that table stands for, or -1.
int unicode_to_byte(std::uint32_t code_point);

}  // namespace accord::unicode
