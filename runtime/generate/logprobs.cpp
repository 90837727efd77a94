#include "runtime/generate/logprobs.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace accord {

TokenLogprobs logprobs_of(std::span<const float> logits, int token, int top) {
  const float highest = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float logit : logits) sum += std::exp(static_cast<double>(logit) - highest);
  const double log_total = highest + std::log(sum);
  const auto logprob = [&](int id) {
    return static_cast<float>(static_cast<double>(logits[static_cast<std::size_t>(id)]) - log_total);
  };
  TokenLogprobs out;
  out.chosen = {token, logprob(token), {}};
  const auto count =
      static_cast<std::size_t>(std::clamp(top, 0, std::min<int>(kMaxTopLogprobs, static_cast<int>(logits.size()))));
  if (count == 0) return out;
  std::vector<int> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(count), ids.end(), [&](int a, int b) {
    const float la = logits[static_cast<std::size_t>(a)];
    const float lb = logits[static_cast<std::size_t>(b)];
    return la != lb ? la > lb : a < b;
  });
  for (std::size_t i = 0; i < count; ++i) out.top.push_back({ids[i], logprob(ids[i]), {}});
  return out;
}

}  // namespace accord
