#include "runtime/model/synthetic.hpp"

#include <cmath>
#include <cstdio>
#include <unordered_set>
#include <vector>

namespace accord {

namespace {

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1).
float uniform(std::uint64_t& state) {
  return static_cast<float>(splitmix64(state) >> 40) / static_cast<float>(1ull << 23) - 1.0f;
}

// The fan-in of a matrix, or 0 for a norm weight.
int fan_in(llama2c::Tensor tensor, const ModelConfig& c) {
  using llama2c::Tensor;
  switch (tensor) {
    case Tensor::wq:
    case Tensor::wk:
    case Tensor::wv:
    case Tensor::wo:
    case Tensor::w1:
    case Tensor::w3:
    case Tensor::classifier:
    case Tensor::token_embedding:
      return c.dim;
    case Tensor::w2:
      return c.hidden_dim;
    default:
      return 0;
  }
}

}  // namespace

Status write_synthetic_model(const std::string& path, const SyntheticModelOptions& options) {
  const ModelConfig& c = options.config;
  auto fill = [&](llama2c::Tensor tensor, float* out, std::size_t count) {
    std::uint64_t state = options.seed * 0x100000001B3ull + static_cast<std::uint64_t>(tensor) + 1;
    const int fan = fan_in(tensor, c);
    // Matrices: uniform with variance 1/fan_in, which keeps activations of
    // order one through the layers. Norm weights: close to one.
    const float scale = fan > 0 ? std::sqrt(3.0f / static_cast<float>(fan)) : 0.1f;
    const float offset = fan > 0 ? 0.0f : 1.0f;
    for (std::size_t i = 0; i < count; ++i) out[i] = offset + scale * uniform(state);
  };
  return llama2c::write(path, c, options.layout, fill);
}

Result<Tokenizer> synthetic_tokenizer(int vocab_size) {
  if (vocab_size < kMinSyntheticVocab) {
    return Error(ErrorCode::contract, "a synthetic tokenizer needs a vocabulary of at least " +
                                          std::to_string(kMinSyntheticVocab) + " tokens, got " +
                                          std::to_string(vocab_size));
  }
  const auto size = static_cast<std::size_t>(vocab_size);
  std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  std::vector<float> scores(3, 0.0f);
  for (int byte = 0; byte < 256; ++byte) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", byte);
    pieces.emplace_back(name);
    scores.push_back(0.0f);
  }
  std::unordered_set<std::string> seen;
  auto add = [&](std::string piece) {
    if (pieces.size() < size && seen.insert(piece).second) {
      scores.push_back(-static_cast<float>(pieces.size()));
      pieces.push_back(std::move(piece));
    }
  };
  for (char c = ' '; c <= '~'; ++c) add(std::string(1, c));
  // Concatenations of earlier pieces with one character, shortest first, so
  // every piece is reachable by merging two others; earlier pieces score
  // higher.
  const std::size_t alphabet_end = pieces.size();
  for (std::size_t round_end = pieces.size(); pieces.size() < size;) {
    for (std::size_t a = 3 + 256; a < round_end && pieces.size() < size; ++a) {
      for (std::size_t b = 3 + 256; b < alphabet_end && pieces.size() < size; ++b) add(pieces[a] + pieces[b]);
    }
    round_end = pieces.size();
  }
  return Tokenizer::from_pieces(std::move(pieces), std::move(scores));
}

}  // namespace accord
