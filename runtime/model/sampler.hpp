// Picks the next token from logits: greedy (temperature 0), or sampling at a
// temperature, optionally restricted to the top-p nucleus. The random stream
// is llama2.c's xorshift*, so a seed gives the same tokens on every run and
// every machine.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/error.hpp"

namespace accord {

struct SamplerOptions {
  float temperature = 1.0f;  // 0 = greedy (argmax); must be >= 0
  float top_p = 0.9f;        // in (0, 1]; 1 = sample from the whole distribution
  std::uint64_t seed = 0;
};

// Checks the ranges documented above.
Status validate(const SamplerOptions& options);

class Sampler {
 public:
  // options must be valid.
  explicit Sampler(const SamplerOptions& options);

  // logits: (vocab). Returns a token id in [0, vocab).
  int sample(std::span<const float> logits);

 private:
  float next_uniform();  // in [0, 1)
  int sample_top_p(float coin);

  SamplerOptions options_;
  std::uint64_t state_;
  std::vector<float> probabilities_;
  std::vector<int> candidates_;
};

// The index of the first maximum.
int argmax(std::span<const float> values);

}  // namespace accord
