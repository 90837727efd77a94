#include "runtime/text/sampler.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <vector>

namespace accord {
namespace {

const std::vector<float> kLogits = {0.5f, 2.0f, 1.9f, -3.0f, 0.0f, 2.0f};

TEST(Sampler, GreedyTakesTheFirstMaximum) {
  Sampler sampler({0.0f, 0.9f, 1});
  EXPECT_EQ(sampler.sample(kLogits), 1);
}

TEST(Sampler, SameSeedSameTokensOtherSeedOtherTokens) {
  auto draw = [](std::uint64_t seed) {
    Sampler sampler({1.0f, 1.0f, seed});
    std::vector<int> tokens;
    for (int i = 0; i < 64; ++i) tokens.push_back(sampler.sample(kLogits));
    return tokens;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
  EXPECT_NE(draw(0), std::vector<int>(64, draw(0)[0]));  // seed 0 is not a stuck stream
}

TEST(Sampler, TopPKeepsOnlyTheNucleus) {
  // Probabilities after softmax: token 1 and 5 dominate; a small top-p must
  // never pick the unlikely tokens 0, 3 or 4.
  Sampler sampler({1.0f, 0.5f, 3});
  std::map<int, int> counts;
  for (int i = 0; i < 500; ++i) counts[sampler.sample(kLogits)]++;
  for (int unlikely : {0, 3, 4}) EXPECT_EQ(counts[unlikely], 0) << unlikely;
  EXPECT_GT(counts[1] + counts[5], 0);
}

TEST(Sampler, LowTemperatureSharpensTowardsArgmax) {
  Sampler sampler({0.01f, 1.0f, 5});
  for (int i = 0; i < 50; ++i) {
    const int t = sampler.sample(kLogits);
    EXPECT_TRUE(t == 1 || t == 5) << t;
  }
}

// 20 / 1e-38 overflows a float: softmax saw infinities, gave NaNs, and the
// sampler returned token 0 or the last one whatever the logits.
TEST(Sampler, ATemperatureTooSmallToDivideTheLogitsByIsGreedy) {
  const std::vector<float> logits = {5.0f, 20.0f, 19.0f, -30.0f};
  for (float temperature : {1e-38f, std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min()}) {
    for (float top_p : {1.0f, 0.9f}) {
      Sampler sampler({temperature, top_p, 3});
      for (int i = 0; i < 20; ++i) EXPECT_EQ(sampler.sample(logits), 1) << temperature << ", top-p " << top_p;
    }
  }
}

// 3 / 1e-30 is a float: the sampler still samples, here between the tied
// tokens 1 and 5, rather than taking the first maximum.
TEST(Sampler, ATinyTemperatureThatDividesStillSamples) {
  Sampler sampler({1e-30f, 1.0f, 5});
  std::map<int, int> counts;
  for (int i = 0; i < 100; ++i) counts[sampler.sample(kLogits)]++;
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[5], 0);
  EXPECT_EQ(counts[1] + counts[5], 100);
}

TEST(Sampler, TinyTopPStillReturnsAToken) {
  Sampler sampler({1.0f, 1e-6f, 9});
  const int t = sampler.sample(kLogits);
  EXPECT_GE(t, 0);
  EXPECT_LT(t, 6);
}

TEST(Sampler, RejectsInvalidOptions) {
  EXPECT_FALSE(validate(SamplerOptions{-0.1f, 0.9f, 0}));
  EXPECT_FALSE(validate(SamplerOptions{1.0f, 0.0f, 0}));
  EXPECT_FALSE(validate(SamplerOptions{1.0f, 1.5f, 0}));
  EXPECT_TRUE(validate(SamplerOptions{0.0f, 1.0f, 0}));
}

TEST(Sampler, ASamplerContinuedFromAnothersStateDrawsWhatItWould) {
  const std::vector<float> logits = {0.1f, 0.5f, 0.2f, 0.9f, 0.3f, 0.4f};
  const SamplerOptions options{1.0f, 0.95f, 11};
  Sampler original(options);
  for (int i = 0; i < 5; ++i) original.sample(logits);
  Sampler continued(original.options(), original.rng_state());
  for (int i = 0; i < 50; ++i) EXPECT_EQ(continued.sample(logits), original.sample(logits)) << "draw " << i;
  EXPECT_EQ(continued.rng_state(), original.rng_state());
}

TEST(Sampler, SampleTokenFlagsTheStopTokens) {
  Sampler greedy({0.0f, 0.9f, 0});
  const std::vector<float> logits = {0.1f, 0.5f, 0.9f};
  EXPECT_EQ(sample_token(greedy, logits, std::vector<int>{1, 2}), (SampledToken{2, true}));
  EXPECT_EQ(sample_token(greedy, logits, std::vector<int>{1}), (SampledToken{2, false}));
  EXPECT_EQ(sample_token(greedy, logits, {}), (SampledToken{2, false}));
}

}  // namespace
}  // namespace accord
