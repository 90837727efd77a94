// SentencePiece-style tokenizer with llama2.c's exact behaviour.
//
// encode: optional BOS, a dummy-prefix space token for non-empty text, one
// token per UTF-8 code point (bytes fall back to their `<0xNN>` pieces when
// the code point has no piece), then repeatedly merge the adjacent pair
// whose concatenation is the piece with the highest score.
// decode: llama2.c's decode plus safe_printf, so generated text matches
// run.c byte for byte.
//
// Immutable after construction; safe to share between threads.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/error.hpp"

namespace accord {

class Tokenizer {
 public:
  // Reads a llama2.c `tokenizer.bin`: int32 max_token_length, then per token
  // float32 score, int32 length, bytes; up to the end of the file.
  static Result<Tokenizer> load_llama2c(const std::string& path);

  // pieces[i] and scores[i] describe token i. Fails on an empty vocabulary
  // or sizes that differ.
  static Result<Tokenizer> from_pieces(std::vector<std::string> pieces, std::vector<float> scores, int bos_id = 1,
                                       int eos_id = 2);

  // Writes the vocabulary in llama2.c's `tokenizer.bin` format.
  Status write_llama2c(const std::string& path) const;

  int vocab_size() const { return static_cast<int>(pieces_.size()); }
  int bos_id() const { return bos_id_; }
  int eos_id() const { return eos_id_; }
  const std::string& piece(int id) const { return pieces_.at(static_cast<std::size_t>(id)); }
  float score(int id) const { return scores_.at(static_cast<std::size_t>(id)); }

  // Fails (contract error) only when a byte has neither a piece of its own
  // nor a `<0xNN>` fallback piece in the vocabulary.
  Result<std::vector<int>> encode(std::string_view text, bool bos, bool eos) const;

  // The bytes run.c prints for `token` when it follows `previous`: the
  // leading space is dropped after BOS, `<0xNN>` becomes its byte, and a
  // lone byte that is neither printable nor whitespace prints as nothing.
  // `token` must be inside the vocabulary.
  std::string decode(int previous, int token) const;

 private:
  Tokenizer() = default;
  int lookup(std::string_view piece) const;

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int> ids_;  // piece -> lowest id with it
  std::array<int, 256> byte_ids_{};           // byte -> id of "<0xNN>", or -1
  int bos_id_ = 1;
  int eos_id_ = 2;
};

}  // namespace accord
