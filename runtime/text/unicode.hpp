// The Unicode pieces of GPT-2 style byte-level BPE: the GPT-2
// pre-tokenizer and the byte <-> printable-character table.
//
// Character classes come from ICU (Debian's libicu): letters are the
// general categories L*, numbers N*, whitespace the White_Space property,
// as in llama.cpp's tables.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/utf8.hpp"

namespace accord::unicode {

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
