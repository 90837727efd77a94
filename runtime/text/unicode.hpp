// GPT-2's byte <-> printable-character table of byte-level BPE
// vocabularies. (Character classes, from ICU, are in pattern.hpp.)
#pragma once

#include <cstdint>
#include <string>

#include "runtime/base/utf8.hpp"

namespace accord::unicode {

// GPT-2's bytes_to_unicode: every byte as one printable character (UTF-8).
const std::string& byte_to_unicode(std::uint8_t byte);
// The byte a character of that table stands for, or -1.
int unicode_to_byte(std::uint32_t code_point);

}  // namespace accord::unicode
