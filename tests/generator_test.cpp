// The generator's retries: an aborted step runs again and generation goes
// on as if it had not failed; a poisoned session, a refused step or a step
// out of retries ends generation with the error and the figures so far.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/generate/generator.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

// A real target whose generation steps (0: the prefill, k: the k-th
// decode) and prompt-cache loads fail as planned. A failed attempt never
// reaches the real target, so it stays as it was, as an abort leaves it.
class FaultyTarget final : public GenerationTarget {
 public:
  explicit FaultyTarget(GenerationTarget& inner) : inner_(inner) {}

  // Fails step `step`'s first `times` attempts with `error`.
  void fail_step(int step, int times, Error error) {
    planned_.insert_or_assign(step, Planned{times, std::move(error)});
  }
  void fail_cache_load(Error error) { cache_load_error_ = std::move(error); }

  const ModelConfig& config() const override { return inner_.config(); }
  int position() const override { return inner_.position(); }
  std::span<const int> tokens() const override { return inner_.tokens(); }
  Status truncate(int position) override { return inner_.truncate(position); }
  // The steps that return logits (log-probabilities) fail as planned too.
  Result<std::span<const float>> forward(std::span<const int> tokens) override {
    if (auto error = planned_failure()) return *error;
    return count(inner_.forward(tokens));
  }
  Result<std::span<const float>> prefill(std::span<const int> tokens) override {
    if (auto error = planned_failure()) return *error;
    return count(inner_.prefill(tokens));
  }
  Result<std::span<const float>> decode(int token) override {
    if (auto error = planned_failure()) return *error;
    return count(inner_.decode(token));
  }
  Result<SampledToken> prefill_and_sample(std::span<const int> tokens, Sampler& sampler,
                                          std::span<const int> stop_tokens) override {
    if (auto error = planned_failure()) return *error;
    return count(inner_.prefill_and_sample(tokens, sampler, stop_tokens));
  }
  Result<SampledToken> decode_and_sample(int token, Sampler& sampler, std::span<const int> stop_tokens,
                                         NextDecode next) override {
    if (auto error = planned_failure()) return *error;
    return count(inner_.decode_and_sample(token, sampler, stop_tokens, next));
  }
  Result<DraftVerdict> decode_draft(int token, std::span<const int> draft) override {
    if (auto error = planned_failure()) return *error;
    auto verdict = inner_.decode_draft(token, draft);
    if (verdict) ++step_;
    return verdict;
  }
  Status load_prompt_cache(const std::filesystem::path& root, const PromptCacheDescriptor& descriptor,
                           std::span<const int> prefix) override {
    if (cache_load_error_) return *cache_load_error_;
    return inner_.load_prompt_cache(root, descriptor, prefix);
  }
  Status save_prompt_cache(const std::filesystem::path& root, const PromptCacheDescriptor& descriptor,
                           std::span<const int> prefix) override {
    return inner_.save_prompt_cache(root, descriptor, prefix);
  }

 private:
  struct Planned {
    int times;
    Error error;
  };

  std::optional<Error> planned_failure() {
    auto planned = planned_.find(step_);
    if (planned == planned_.end() || planned->second.times == 0) return std::nullopt;
    --planned->second.times;
    return planned->second.error;
  }
  template <class Step>
  Step count(Step done) {
    if (done) ++step_;
    return done;
  }

  GenerationTarget& inner_;
  std::map<int, Planned> planned_;
  std::optional<Error> cache_load_error_;
  int step_ = 0;
};

Error aborted() {
  return std::move(Error(ErrorCode::mechanism, "transaction aborted at epoch 4: injected fault").at(4, "Execution"));
}

Error poisoned() { return Error::poisoned({"rank 1 is down", 1, "Execution", 4}); }

class GeneratorRetries : public ::testing::Test {
 protected:
  GeneratorRetries() {
    options_.max_tokens = 12;
    options_.sampler = {0.9f, 0.9f, 42};  // sampled, so a retry must leave the sampler's stream alone
  }

  // Generates on a fresh session, through a FaultyTarget that `plan` sets up.
  GenerationOutcome generate_with(const std::function<void(FaultyTarget&)>& plan) {
    Session session(model_, pool_);
    SessionTarget real(session);
    FaultyTarget target(real);
    plan(target);
    return generate(target, tokenizer_, "Once upon a time", options_);
  }

  std::vector<int> unfaulted_tokens() {
    auto result = generate_with([](FaultyTarget&) {});
    EXPECT_TRUE(result) << result.error().message();
    return result->generated_tokens;
  }

  const Model model_ = test::load_stories_model();
  const Tokenizer tokenizer_ = test::load_stories_tokenizer();
  cpu::ThreadPool pool_{1};
  GenerationOptions options_;
};

TEST_F(GeneratorRetries, AbortedStepsAreRetriedAndGiveTheSameTokens) {
  const auto expected = unfaulted_tokens();
  auto result = generate_with([](FaultyTarget& target) {
    target.fail_step(0, 1, aborted());  // the prefill
    target.fail_step(5, 2, aborted());  // the fifth decode, twice
  });
  ASSERT_TRUE(result) << result.error().message();
  EXPECT_EQ(result->generated_tokens, expected);
  EXPECT_EQ(result->stop_reason, StopReason::max_tokens);
  EXPECT_EQ(result->aborted_steps, 3);
  EXPECT_EQ(result->retries, 3);
  EXPECT_FALSE(result->poisoned);
}

TEST_F(GeneratorRetries, UnfaultedGenerationCountsNothing) {
  auto result = generate_with([](FaultyTarget&) {});
  ASSERT_TRUE(result) << result.error().message();
  EXPECT_EQ(result->aborted_steps, 0);
  EXPECT_EQ(result->retries, 0);
  EXPECT_FALSE(result->poisoned);
  EXPECT_EQ(result->poison_cause, "");
}

TEST_F(GeneratorRetries, APoisonedSessionStopsAtOnce) {
  const auto expected = unfaulted_tokens();
  auto result = generate_with([](FaultyTarget& target) { target.fail_step(2, 5, poisoned()); });
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().message(), "the session is poisoned: rank 1 is down");
  const GenerationResult& partial = result.error().partial;
  EXPECT_TRUE(partial.poisoned);
  EXPECT_EQ(partial.poison_cause, "rank 1 is down");
  EXPECT_EQ(partial.aborted_steps, 0);
  EXPECT_EQ(partial.retries, 0);
  EXPECT_EQ(partial.stop_reason, StopReason::error);
  // The prefill's token and the first decode's were emitted before.
  EXPECT_EQ(partial.generated_tokens, std::vector<int>(expected.begin(), expected.begin() + 2));
}

TEST_F(GeneratorRetries, APoisonedErrorKeepsItsPoison) {
  auto result = generate_with([&](FaultyTarget& target) { target.fail_step(0, 1, poisoned()); });
  ASSERT_FALSE(result);
  ASSERT_TRUE(result.error().error.poison());
  EXPECT_EQ(*result.error().error.poison(), (Poison{"rank 1 is down", 1, "Execution", 4}));
  EXPECT_EQ(result.error().message(), "the session is poisoned: rank 1 is down");
}

// A target that is neither session may report a poison without a Poison.
TEST_F(GeneratorRetries, APoisonedErrorIsNamedSoWhateverItsWording) {
  const Error bare =
      std::move(Error(ErrorCode::commit_indeterminate, "undoing its publication failed").at(7, "Commit"));
  auto result = generate_with([&](FaultyTarget& target) { target.fail_step(0, 1, bare); });
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().message(), "the session is poisoned: undoing its publication failed");
  EXPECT_EQ(result.error().error.code(), ErrorCode::commit_indeterminate);
  EXPECT_EQ(result.error().error.epoch(), 7u);
  EXPECT_EQ(result.error().error.phase(), "Commit");
  EXPECT_EQ(result.error().partial.poison_cause, "undoing its publication failed");
}

TEST_F(GeneratorRetries, AStepOutOfRetriesStopsWithItsError) {
  const auto expected = unfaulted_tokens();
  for (const int retries : {0, 2}) {
    options_.retries = retries;
    auto result = generate_with([&](FaultyTarget& target) { target.fail_step(1, retries + 1, aborted()); });
    ASSERT_FALSE(result) << retries << " retries";
    EXPECT_EQ(result.error().message(), aborted().message());
    const GenerationResult& partial = result.error().partial;
    EXPECT_EQ(partial.aborted_steps, retries + 1);
    EXPECT_EQ(partial.retries, retries);
    EXPECT_FALSE(partial.poisoned);
    EXPECT_EQ(partial.stop_reason, StopReason::error);
    EXPECT_EQ(partial.generated_tokens, std::vector<int>(1, expected.front()));
  }
}

TEST_F(GeneratorRetries, ARefusedStepIsNotRetried) {
  Error refused(ErrorCode::state, "the session is busy");
  refused.mark_before_state_mutation();
  auto result = generate_with([&](FaultyTarget& target) { target.fail_step(0, 1, refused); });
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().message(), "the session is busy");
  EXPECT_EQ(result.error().partial.aborted_steps, 0);
  EXPECT_EQ(result.error().partial.retries, 0);
}

TEST_F(GeneratorRetries, NegativeRetriesAreRefused) {
  options_.retries = -1;
  auto result = generate_with([](FaultyTarget&) {});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().message(), "retries must be at least 0, got -1");
}

TEST_F(GeneratorRetries, AnAbortedCacheLoadFallsBackToAColdPrefill) {
  test::TempDir dir;
  options_.prompt_cache = dir.file("cache");
  auto saved = generate_with([](FaultyTarget&) {});
  ASSERT_TRUE(saved) << saved.error().message();
  ASSERT_EQ(saved->prompt_cache, PromptCacheOutcome::saved);

  auto result = generate_with([](FaultyTarget& target) { target.fail_cache_load(aborted()); });
  ASSERT_TRUE(result) << result.error().message();
  EXPECT_EQ(result->prompt_cache, PromptCacheOutcome::rejected);
  EXPECT_EQ(result->prompt_cache_reason, aborted().message());
  EXPECT_EQ(result->prompt_cache_tokens_reused, 0);
  EXPECT_EQ(result->generated_tokens, saved->generated_tokens);
}

TEST_F(GeneratorRetries, APoisonedCacheLoadStopsGeneration) {
  test::TempDir dir;
  options_.prompt_cache = dir.file("cache");
  ASSERT_TRUE(generate_with([](FaultyTarget&) {}));

  auto result = generate_with([](FaultyTarget& target) { target.fail_cache_load(poisoned()); });
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().message(), poisoned().message());
  EXPECT_TRUE(result.error().partial.poisoned);
  EXPECT_TRUE(result.error().partial.generated_tokens.empty());
}

TEST(Logprobs, AreTheLogSoftmaxOfTheLogits) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f};
  const double total = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0));
  const TokenLogprobs got = logprobs_of(logits, 2, 3);
  EXPECT_EQ(got.chosen.token, 2);
  EXPECT_NEAR(got.chosen.logprob, 2.0 - total, 1e-6);
  ASSERT_EQ(got.top.size(), 3u);
  EXPECT_EQ(got.top[0].token, 1);  // a tie goes to the lower id
  EXPECT_EQ(got.top[1].token, 3);
  EXPECT_EQ(got.top[2].token, 2);
  EXPECT_NEAR(got.top[0].logprob, 3.0 - total, 1e-6);
  EXPECT_TRUE(logprobs_of(logits, 0, 0).top.empty());
  EXPECT_EQ(logprobs_of(logits, 0, 20).top.size(), 4u);  // no more than the vocabulary
}

// Asking for log-probabilities changes no token: the generator samples the
// step's logits as the target would have, sampled or greedy, retried or not.
TEST_F(GeneratorRetries, LogprobsLeaveTheTokensAsTheyWere) {
  const auto expected = unfaulted_tokens();
  options_.top_logprobs = 3;
  auto result = generate_with([](FaultyTarget& target) {
    target.fail_step(0, 1, aborted());
    target.fail_step(4, 2, aborted());
  });
  ASSERT_TRUE(result) << result.error().message();
  EXPECT_EQ(result->generated_tokens, expected);
  EXPECT_EQ(result->retries, 3);
  ASSERT_EQ(result->generated_logprobs.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const TokenLogprobs& token = result->generated_logprobs[i];
    EXPECT_EQ(token.chosen.token, expected[i]);
    EXPECT_LE(token.chosen.logprob, 0.0f);
    ASSERT_EQ(token.top.size(), 3u);
    EXPECT_GE(token.top[0].logprob, token.chosen.logprob);  // the likeliest is at least as likely
    const int previous = i == 0 ? result->prompt_tokens.back() : expected[i - 1];
    EXPECT_EQ(token.chosen.text, tokenizer_.decode(previous, expected[i]));
  }
  EXPECT_TRUE(result->prompt_logprobs.empty());
}

// The prompt's log-probabilities, in steps of a few rows, are those that
// prefilling each prefix alone gives for the token after it.
TEST_F(GeneratorRetries, PromptLogprobsAreThoseOfEachPrefix) {
  const auto expected_tokens = unfaulted_tokens();
  options_.top_logprobs = 2;
  options_.prompt_logprobs = true;
  options_.prompt_logprob_floats = 3 * 512;  // three rows a step
  std::vector<std::pair<TokenLogprobs, bool>> told;
  options_.on_logprobs = [&](const TokenLogprobs& token, bool prompt) { told.emplace_back(token, prompt); };
  auto result = generate_with([](FaultyTarget& target) { target.fail_step(1, 1, aborted()); });
  ASSERT_TRUE(result) << result.error().message();
  const std::vector<int>& prompt = result->prompt_tokens;
  ASSERT_EQ(result->prompt_logprobs.size(), prompt.size() - 1);
  ASSERT_EQ(told.size(), result->prompt_logprobs.size() + result->generated_logprobs.size());
  std::string text;
  for (std::size_t at = 1; at < prompt.size(); ++at) {
    Session alone(model_, pool_);
    auto step = alone.prefill(std::span<const int>(prompt).first(at));
    ASSERT_TRUE(step);
    const TokenLogprobs expected = logprobs_of(step->logits, prompt[at], 2);
    const TokenLogprobs& got = result->prompt_logprobs[at - 1];
    EXPECT_EQ(got.chosen.token, prompt[at]);
    EXPECT_FLOAT_EQ(got.chosen.logprob, expected.chosen.logprob) << at;
    EXPECT_EQ(got.top[0].token, expected.top[0].token);
    EXPECT_TRUE(told[at - 1].second);
    text += got.chosen.text;
  }
  EXPECT_EQ(text, "Once upon a time");
  EXPECT_EQ(result->generated_tokens, expected_tokens);
}

TEST_F(GeneratorRetries, LogprobsOutOfRangeAreRefused) {
  options_.top_logprobs = 21;
  EXPECT_EQ(generate_with([](FaultyTarget&) {}).error().error.code(), ErrorCode::contract);
  options_.top_logprobs = -1;
  options_.prompt_logprobs = true;
  EXPECT_EQ(generate_with([](FaultyTarget&) {}).error().error.code(), ErrorCode::contract);
}

}  // namespace
}  // namespace accord
