// Picks the next token from logits: greedy (temperature 0), or sampling at a
// temperature, optionally restricted to the top-p nucleus. The random stream
// is llama2.c's xorshift*, so a seed gives the same tokens on every run and
// every machine.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/base/error.hpp"

namespace accord {

struct SamplerOptions {
  // 0 = greedy (argmax); must be >= 0. A temperature so small that a logit
  // divided by it overflows a float (below about 1e-37 with usual logits)
  // is greedy too: sampling approaches argmax as the temperature falls.
  float temperature = 1.0f;
  float top_p = 0.9f;  // in (0, 1]; 1 = sample from the whole distribution
  std::uint64_t seed = 0;
};

// Checks the ranges documented above.
Status validate(const SamplerOptions& options);

class Sampler {
 public:
  // options must be valid.
  explicit Sampler(const SamplerOptions& options);
  // Continues a random stream where another sampler with the same options
  // stood (its rng_state()): both draw the same tokens from then on. This is
  // how a sampler's state travels to the rank that samples and back.
  Sampler(const SamplerOptions& options, std::uint64_t rng_state);

  const SamplerOptions& options() const { return options_; }
  std::uint64_t rng_state() const { return state_; }

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

// A generation step's pick: the token, and whether it is one of the tokens
// that end generation (the generator's BOS and EOS).
struct SampledToken {
  int token = 0;
  bool stop = false;
  bool operator==(const SampledToken&) const = default;
};

// Whether `token` is one of stop_tokens.
bool is_stop_token(int token, std::span<const int> stop_tokens);

// Samples from logits (vocab) and checks the pick against stop_tokens.
SampledToken sample_token(Sampler& sampler, std::span<const float> logits, std::span<const int> stop_tokens);

// The index of the first maximum.
int argmax(std::span<const float> values);

}  // namespace accord
