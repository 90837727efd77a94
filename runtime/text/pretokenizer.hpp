// The pre-tokenizers of byte-level BPE vocabularies: how the text of a
// `tokenizer.ggml.pre` kind splits into words before BPE merges run in
// each word. Each kind is data: llama.cpp's list of regular expressions
// (runtime/text/pattern.hpp), applied one after another so that each
// splits the pieces the previous ones left, and a few flags.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/text/pattern.hpp"

namespace accord {

class PreTokenizer {
 public:
  // The pre-tokenizer named by `tokenizer.ggml.pre` ("default" when the
  // key is absent), or for `tokenizer.ggml.model` "gemma4" its own; an
  // architecture error names a kind accord does not know.
  static Result<PreTokenizer> named(std::string_view name);

  // The words of `text`, each in the vocabulary's spelling: with
  // byte_encode, every byte as GPT-2's printable character. Invalid UTF-8
  // reads as U+FFFD, as in llama.cpp. `steps` counts the matcher's work.
  std::vector<std::string> words(std::string_view text, std::uint64_t& steps) const;

  const std::string& name() const { return name_; }
  // Words are GPT-2 byte-encoded (else raw UTF-8, bytes as <0xNN> pieces).
  bool byte_encode() const { return byte_encode_; }
  // A word that is a token is that token, without merging (Llama 3).
  bool ignore_merges() const { return ignore_merges_; }
  // Spaces are written as U+2581 before splitting (gemma4).
  bool escape_whitespace() const { return escape_whitespace_; }
  // Whether BOS is added unless the file says otherwise.
  bool add_bos() const { return add_bos_; }

 private:
  std::string name_;
  std::vector<unicode::Pattern> patterns_;
  bool byte_encode_ = true;
  bool ignore_merges_ = false;
  bool escape_whitespace_ = false;
  bool add_bos_ = false;
};

}  // namespace accord
