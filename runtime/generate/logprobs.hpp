// Log-probabilities of tokens, as OpenAI reports them: the log-softmax of a
// step's logits at temperature 1, before any sampler (temperature, top-p),
// for the token that was kept and the likeliest tokens of that step.
#pragma once

#include <span>
#include <string>
#include <vector>

namespace accord {

inline constexpr int kMaxTopLogprobs = 20;

struct TokenChoice {
  int token = 0;
  float logprob = 0;
  std::string text;  // the token's text where it stands (Tokenizer::decode)
};

struct TokenLogprobs {
  TokenChoice chosen;
  std::vector<TokenChoice> top;  // the likeliest first; ties: the lower id
};

// The log-probability of `token` in `logits`, and the `top` likeliest
// tokens' (0 to kMaxTopLogprobs). Texts are left empty. Summed in double, so
// that a vocabulary of many small probabilities loses nothing.
TokenLogprobs logprobs_of(std::span<const float> logits, int token, int top);

}  // namespace accord
