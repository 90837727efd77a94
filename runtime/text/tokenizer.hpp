// Tokenizers: SentencePiece-style (llama2.c's tokenizer.bin, or a GGUF
// "llama" vocabulary), GPT-2-style byte-level BPE (a GGUF "gpt2"
// vocabulary with merges and a `tokenizer.ggml.pre` pre-tokenizer) and
// Gemma 4's SentencePiece pieces merged by rank (GGUF "gemma4"); each
// encodes as llama.cpp's llama_tokenize does.
//
// Encode first cuts the special tokens written in the text out of it:
// user-defined tokens always, control tokens when parse_special is set
// (llama.cpp's tokenizer_st_partition: longest token first, each wherever
// it occurs). The text between them is encoded as follows.
// SentencePiece (llama2.c's algorithm, which llama.cpp's SPM tokenizer
// equals on every test vector): a dummy-prefix space before a text that
// starts the input or follows a special token, one token per UTF-8 code
// point (bytes fall back to their `<0xNN>` pieces when the code point has
// no piece), then repeatedly merge the adjacent pair whose concatenation
// is the piece with the highest score, leftmost on ties. GGUF vocabularies
// spell the space as U+2581, so text spaces are escaped to it first.
// Byte-level BPE: the pre-tokenizer (pretokenizer.hpp) splits the text
// into words, each word's bytes become GPT-2's printable characters, and
// adjacent symbols merge by the lowest merge rank, leftmost on ties; a
// symbol with no token becomes its bytes' tokens, or nothing (as in
// llama.cpp). Gemma 4: spaces become U+2581, lines are words, and the
// UTF-8 characters merge by rank, bytes falling back to `<0xNN>`.
// decode: for SentencePiece, llama2.c's decode plus safe_printf, so text
// matches run.c byte for byte (U+2581 reads as a space); for BPE, the
// piece's bytes.
//
// Immutable after construction; safe to share between threads.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/model/gguf.hpp"
#include "runtime/text/pretokenizer.hpp"

namespace accord {

enum class TokenizerKind {
  llama2c,        // llama2.c tokenizer.bin: SentencePiece pieces with literal spaces
  sentencepiece,  // GGUF tokenizer.ggml.model "llama": spaces spelt U+2581
  byte_bpe,       // GGUF tokenizer.ggml.model "gpt2": byte-level BPE with merges
  piece_bpe,      // GGUF tokenizer.ggml.model "gemma4": U+2581 pieces merged by rank
};

// llama.cpp's token attributes, from tokenizer.ggml.token_type (and the
// names llama.cpp recognises).
enum TokenAttribute : std::uint8_t {
  kTokenNormal = 1,
  kTokenUnknown = 2,
  kTokenControl = 4,
  kTokenUserDefined = 8,
  kTokenByte = 16,
  kTokenUnused = 32,
  kTokenStripRight = 64,  // whitespace after it in the text is dropped (Phi-3)
};

struct EncodeOptions {
  bool bos = false;  // start with the BOS token
  bool eos = false;  // end with the EOS token
  // Control tokens written in the text (`<|im_start|>`) become their ids;
  // otherwise they are text. User-defined tokens are always taken.
  bool parse_special = false;
};

// The work one encode did, counted for tests of its complexity: the
// adjacent pairs looked up in the vocabulary and the merge candidates taken
// from the queue.
struct EncodeCost {
  std::uint64_t pair_lookups = 0;
  std::uint64_t queue_pops = 0;
  std::uint64_t pattern_steps = 0;  // the pre-tokenizer's matcher
  std::uint64_t total() const { return pair_lookups + queue_pops + pattern_steps; }
};

class Tokenizer {
 public:
  // Reads a tokenizer file: a GGUF file's vocabulary (recognised by its
  // magic) or else a llama2.c tokenizer.bin.
  static Result<Tokenizer> load(const std::string& path);

  // Reads a llama2.c `tokenizer.bin`: int32 max_token_length, then per token
  // float32 score, int32 length, bytes; up to the end of the file.
  static Result<Tokenizer> load_llama2c(const std::string& path);
  // The same from a file's bytes; `name` prefixes error messages.
  static Result<Tokenizer> read_llama2c(std::span<const std::byte> bytes, const std::string& name);

  // The vocabulary of a parsed GGUF file (tokenizer.ggml.* keys); format
  // error when it is missing or inconsistent.
  static Result<Tokenizer> from_gguf(const gguf::File& file, const std::string& name);

  // A llama2.c-kind vocabulary: pieces[i] and scores[i] describe token i.
  // Fails on an empty vocabulary or sizes that differ.
  static Result<Tokenizer> from_pieces(std::vector<std::string> pieces, std::vector<float> scores, int bos_id = 1,
                                       int eos_id = 2);

  // Writes the vocabulary in llama2.c's `tokenizer.bin` format.
  Status write_llama2c(const std::string& path) const;

  // The tokenizer.ggml.* metadata of this vocabulary, for a GGUF file. A
  // llama2.c vocabulary is written as a "llama" one (spaces as U+2581).
  gguf::Metadata gguf_metadata() const;

  TokenizerKind kind() const { return kind_; }
  int vocab_size() const { return static_cast<int>(pieces_.size()); }
  // Refuses (architecture error) a vocabulary whose size is not the model's
  // `model_vocab_size`: its ids would not index the model's logits.
  Status check_fits(int model_vocab_size) const;
  int bos_id() const { return bos_id_; }
  int eos_id() const { return eos_id_; }
  // Whether a prompt starts with BOS / ends with EOS, as the file says
  // (tokenizer.ggml.add_bos_token / add_eos_token, else llama.cpp's
  // default for the kind).
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // The tokens that end generation, ascending: EOS, EOT, EOM and the
  // tokens llama.cpp recognises by name (<|eot_id|>, <|im_end|>,
  // <end_of_turn>, <|endoftext|>, ...).
  const std::vector<int>& end_of_generation() const { return end_of_generation_; }
  // TokenAttribute bits of `id`.
  std::uint8_t attributes(int id) const { return attributes_.at(static_cast<std::size_t>(id)); }
  // The `tokenizer.ggml.pre` of a BPE vocabulary; empty for the others.
  const std::string& pre_tokenizer() const { return pre_.name(); }
  const std::string& piece(int id) const { return pieces_.at(static_cast<std::size_t>(id)); }
  float score(int id) const { return scores_.at(static_cast<std::size_t>(id)); }

  // Fails (contract error) only when BOS or EOS is asked for and the
  // vocabulary has none, or when a SentencePiece byte has neither a piece
  // of its own nor a `<0xNN>` fallback piece (BPE drops such bytes, as
  // llama.cpp does). O(n log n) in the text's length; `cost`, when given,
  // is added the work done.
  Result<std::vector<int>> encode(std::string_view text, const EncodeOptions& options,
                                  EncodeCost* cost = nullptr) const;
  // The same without parse_special.
  Result<std::vector<int>> encode(std::string_view text, bool bos, bool eos, EncodeCost* cost = nullptr) const {
    return encode(text, EncodeOptions{bos, eos, false}, cost);
  }
  // The most bytes one token stands for: a text of more bytes than a
  // context's tokens times this cannot fit that context.
  std::size_t longest_piece_bytes() const { return longest_piece_bytes_; }

  // The bytes printed for `token` when it follows `previous`. SentencePiece
  // kinds print what run.c prints: the leading space is dropped after BOS,
  // `<0xNN>` becomes its byte, and a lone byte that is neither printable
  // nor whitespace prints as nothing. BPE prints the token's bytes; Gemma
  // 4 pieces print with U+2581 as a space and `<0xNN>` as its byte.
  // `token` must be inside the vocabulary.
  std::string decode(int previous, int token) const;
  // The bytes `token` stands for on its own, as llama.cpp's token_to_piece
  // gives them: U+2581 as a space, `<0xNN>` as its byte, a byte-level
  // piece as its bytes; control tokens as their text.
  std::string token_text(int token) const {
    return kind_ == TokenizerKind::byte_bpe ? decode_bpe(token) : decode_pieces(token);
  }

 private:
  Tokenizer() = default;
  static Result<Tokenizer> build(TokenizerKind kind, std::vector<std::string> pieces, std::vector<float> scores,
                                 int bos_id, int eos_id);
  int lookup(std::string_view piece) const;
  bool is_byte_piece(int id) const;
  // A part of the text to encode, or a special token cut out of it.
  struct Fragment {
    std::size_t begin;
    std::size_t length;
    int token;  // -1: text
  };
  std::vector<Fragment> partition(std::string_view text, bool parse_special) const;
  Status encode_sentencepiece(std::string_view text, bool space_prefix, std::vector<int>& tokens,
                              EncodeCost* cost) const;
  void encode_bpe(std::string_view text, std::vector<int>& tokens, EncodeCost* cost) const;
  void encode_bpe_word(const std::string& word, std::vector<int>& tokens, EncodeCost* cost) const;
  void append_symbol_bytes(const std::string& symbol, std::vector<int>& tokens) const;
  void collect_special_tokens();
  void find_end_of_generation(const std::vector<int>& keyed);
  void strip_right_of_special_tokens();
  Status read_gguf_details(const gguf::File& file, const std::string& name);
  Status append_code_points(std::string_view text, std::vector<int>& tokens) const;
  void merge_by_score(std::vector<int>& tokens, EncodeCost* cost) const;
  void merge_by_rank(std::vector<std::string>& symbols, EncodeCost* cost) const;
  int merge_rank(const std::string& left, const std::string& right) const;
  std::string decode_sentencepiece(int previous, int token) const;
  std::string decode_bpe(int token) const;
  std::string decode_pieces(int token) const;

  TokenizerKind kind_ = TokenizerKind::llama2c;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int> ids_;          // piece -> lowest id with it
  std::array<int, 256> byte_ids_{};                   // byte -> id of "<0xNN>", or -1
  std::unordered_map<std::string, int> merge_ranks_;  // "left\0right" -> rank (BPE)
  std::vector<std::string> merges_;                   // in rank order (BPE)
  bool add_space_prefix_ = true;                      // SentencePiece dummy prefix
  std::size_t longest_piece_bytes_ = 1;
  int bos_id_ = 1;
  int eos_id_ = 2;
  bool add_bos_ = true;
  bool add_eos_ = false;
  PreTokenizer pre_;                      // BPE kinds
  std::vector<std::uint8_t> attributes_;  // TokenAttribute bits per token
  std::vector<int> special_tokens_;       // control, user-defined, unknown: longest first
  std::vector<int> end_of_generation_;
};

}  // namespace accord
