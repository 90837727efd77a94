// Synthetic models: valid llama2.c checkpoints with deterministic random
// weights, for demos, tests and benchmarks of shapes larger than the shared
// models. The same shape and seed give the same bytes on every machine.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/error.hpp"
#include "runtime/model/llama2c.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/tokenizer.hpp"

namespace accord {

struct SyntheticModelOptions {
  ModelConfig config;  // shape; rope_theta and norm_eps are llama2.c's
  std::uint64_t seed = 1;
  llama2c::Layout layout = llama2c::Layout::legacy;
};

// Writes the checkpoint to `path`. Each tensor draws from its own stream
// (seed, tensor), so both layouts hold the same weights.
Status write_synthetic_model(const std::string& path, const SyntheticModelOptions& options);

// The smallest vocabulary a synthetic tokenizer supports: <unk>, <s>, </s>
// and the 256 byte pieces, so that every text can be encoded.
inline constexpr int kMinSyntheticVocab = 3 + 256;

// A deterministic SentencePiece-style vocabulary of `vocab_size` pieces:
// the specials, the byte pieces, the printable ASCII characters, then
// concatenations of earlier pieces, with scores that favour longer ones.
Result<Tokenizer> synthetic_tokenizer(int vocab_size);

}  // namespace accord
