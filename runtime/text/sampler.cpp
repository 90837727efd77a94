#include "runtime/text/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "kernels/cpu/ops.hpp"

namespace accord {

Status validate(const SamplerOptions& options) {
  if (!(options.temperature >= 0.0f) || !std::isfinite(options.temperature)) {
    return Error(ErrorCode::contract,
                 "temperature must be a finite number >= 0, got " + std::to_string(options.temperature));
  }
  if (!(options.top_p > 0.0f && options.top_p <= 1.0f)) {
    return Error(ErrorCode::contract, "top-p must be in (0, 1], got " + std::to_string(options.top_p));
  }
  return {};
}

// xorshift* needs a non-zero state; seed 0 maps to a fixed constant.
Sampler::Sampler(const SamplerOptions& options)
    : options_(options), state_(options.seed != 0 ? options.seed : 0x9E3779B97F4A7C15ull) {}

// A zero state would make xorshift* draw zeros forever; only a corrupted
// state can be zero, and it is mapped like seed 0.
Sampler::Sampler(const SamplerOptions& options, std::uint64_t rng_state)
    : options_(options), state_(rng_state != 0 ? rng_state : 0x9E3779B97F4A7C15ull) {}

SampledToken sample_token(Sampler& sampler, std::span<const float> logits, std::span<const int> stop_tokens) {
  const int token = sampler.sample(logits);
  return {token, is_stop_token(token, stop_tokens)};
}

bool is_stop_token(int token, std::span<const int> stop_tokens) {
  return std::find(stop_tokens.begin(), stop_tokens.end(), token) != stop_tokens.end();
}

int argmax(std::span<const float> values) {
  return static_cast<int>(std::max_element(values.begin(), values.end()) - values.begin());
}

float Sampler::next_uniform() {
  state_ ^= state_ >> 12;
  state_ ^= state_ << 25;
  state_ ^= state_ >> 27;
  const auto bits = static_cast<std::uint32_t>((state_ * 0x2545F4914F6CDD1Dull) >> 32);
  return static_cast<float>(bits >> 8) / 16777216.0f;
}

namespace {

// Whether some logit / temperature overflows a float: softmax would then
// see infinities and give NaNs. Sampling is argmax in all but name long
// before the temperature gets that small, so the sampler is greedy there.
bool scaling_overflows(std::span<const float> logits, float temperature) {
  float largest = 0.0f;
  for (float logit : logits) largest = std::max(largest, std::fabs(logit));
  return largest / temperature > std::numeric_limits<float>::max();
}

}  // namespace

int Sampler::sample(std::span<const float> logits) {
  if (options_.temperature == 0.0f || scaling_overflows(logits, options_.temperature)) return argmax(logits);
  probabilities_.assign(logits.begin(), logits.end());
  for (float& p : probabilities_) p /= options_.temperature;
  cpu::softmax(probabilities_.data(), static_cast<int>(probabilities_.size()));
  const float coin = next_uniform();
  if (options_.top_p >= 1.0f) {
    float cdf = 0.0f;
    for (std::size_t i = 0; i < probabilities_.size(); ++i) {
      cdf += probabilities_[i];
      if (coin < cdf) return static_cast<int>(i);
    }
    return static_cast<int>(probabilities_.size()) - 1;  // rounding left the cdf below the coin
  }
  return sample_top_p(coin);
}

// Samples among the smallest set of most likely tokens whose probabilities
// add up to more than top_p. Tokens below (1 - top_p) / (n - 1) cannot be in
// that set and are skipped before sorting, as llama2.c does.
int Sampler::sample_top_p(float coin) {
  const auto n = probabilities_.size();
  const float cutoff = n > 1 ? (1.0f - options_.top_p) / static_cast<float>(n - 1) : 0.0f;
  candidates_.clear();
  for (std::size_t i = 0; i < n; ++i) {
    if (probabilities_[i] >= cutoff) candidates_.push_back(static_cast<int>(i));
  }
  // With top_p below 1/n even the most likely token can miss the cutoff.
  if (candidates_.empty()) return argmax(probabilities_);
  // Stable and keyed on the id too, so ties order the same everywhere.
  std::sort(candidates_.begin(), candidates_.end(), [&](int a, int b) {
    const float pa = probabilities_[static_cast<std::size_t>(a)];
    const float pb = probabilities_[static_cast<std::size_t>(b)];
    return pa != pb ? pa > pb : a < b;
  });
  float cumulative = 0.0f;
  std::size_t last = candidates_.size() - 1;
  for (std::size_t i = 0; i < candidates_.size(); ++i) {
    cumulative += probabilities_[static_cast<std::size_t>(candidates_[i])];
    if (cumulative > options_.top_p) {
      last = i;
      break;
    }
  }
  const float target = coin * cumulative;
  float cdf = 0.0f;
  for (std::size_t i = 0; i <= last; ++i) {
    cdf += probabilities_[static_cast<std::size_t>(candidates_[i])];
    if (target < cdf) return candidates_[i];
  }
  return candidates_[last];
}

}  // namespace accord
