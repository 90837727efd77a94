// Continuous batching: several sequences in one forward pass compute what
// each computes alone, bit for bit, and one session's abort leaves the
// others' tokens as they were.
#include "runtime/rank/step_batcher.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "runtime/session/session.hpp"
#include "runtime/text/sampler.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

TEST(TransformerLanes, EachLaneComputesWhatItsSequenceComputesAlone) {
  test::TempDir dir;
  SyntheticModelOptions options;
  options.config = test::small_config();
  const Model model = test::synthetic_model(dir, options);
  const ModelConfig& c = model.config();
  cpu::ThreadPool pool(2);
  Transformer alone(model, pool), together(model, pool);

  // Sequence a: a prefill of 5. Sequence b: 3 tokens already in its cache,
  // then one decode token. Sequence c: 4 tokens, logits of every row.
  const std::vector<int> a = {1, 40, 77, 12, 250}, b_prefix = {1, 99, 3}, b = {150}, c_tokens = {1, 7, 8, 9};
  KvCache kv_a(c, 0, c.n_layers), kv_b(c, 0, c.n_layers), kv_c(c, 0, c.n_layers);
  KvCache solo_a(c, 0, c.n_layers), solo_b(c, 0, c.n_layers), solo_c(c, 0, c.n_layers);
  ASSERT_TRUE(alone.forward(b_prefix, 0, kv_b));
  ASSERT_TRUE(alone.forward(b_prefix, 0, solo_b));

  const std::vector<float> expect_a = test::to_vector(*alone.forward(a, 0, solo_a));
  const std::vector<float> expect_b = test::to_vector(*alone.forward(b, 3, solo_b));
  ASSERT_TRUE(solo_c.reserve(4));
  alone.embed(c_tokens);
  for (int unit = 0; unit < c.n_layers; ++unit) alone.run_unit(unit, 0, solo_c);
  const std::vector<float> expect_c = test::to_vector(alone.head(Transformer::Rows::all));

  for (KvCache* kv : {&kv_a, &kv_b, &kv_c}) ASSERT_TRUE(kv->reserve(5));
  const std::vector<Transformer::Lane> lanes = {{a, 0, &kv_a, false}, {b, 3, &kv_b, false}, {c_tokens, 0, &kv_c, true}};
  const std::vector<float> logits = test::to_vector(together.forward_lanes(lanes));
  const auto vocab = static_cast<std::size_t>(c.vocab_size);
  ASSERT_EQ(logits.size(), (1 + 1 + c_tokens.size()) * vocab);
  const std::span<const float> all(logits);
  EXPECT_TRUE(test::bit_identical(all.subspan(0, vocab), expect_a));
  EXPECT_TRUE(test::bit_identical(all.subspan(vocab, vocab), expect_b));
  EXPECT_TRUE(test::bit_identical(all.subspan(2 * vocab), expect_c));
  EXPECT_EQ(together.hidden().size(), (a.size() + b.size() + c_tokens.size()) * c.dim);

  // Each lane wrote its own cache, and only its own positions.
  for (int unit = 0; unit < c.n_layers; ++unit) {
    for (const auto& [mine, solo, rows] :
         {std::tuple{&kv_a, &solo_a, 5}, std::tuple{&kv_b, &solo_b, 4}, std::tuple{&kv_c, &solo_c, 4}}) {
      EXPECT_TRUE(test::bit_identical(test::kv_rows(*mine, unit, 0, rows), test::kv_rows(*solo, unit, 0, rows)));
    }
  }
}

// Long enough that a batch never starts without every member's step.
constexpr std::chrono::microseconds kPatientWindow = std::chrono::seconds(60);

const std::vector<std::vector<int>> kPrompts = {
    {1, 403, 407, 261, 378}, {1, 261, 378}, {1, 350, 290, 300, 301, 302, 500}, {1, 410}};
constexpr int kSteps = 12;

class StepBatcherTest : public ::testing::Test {
 protected:
  Model model_ = test::load_stories_model();
  cpu::ThreadPool pool_{2};

  // The greedy trace and final digest of each prompt on a session alone.
  std::vector<std::vector<float>> solo_traces(std::vector<std::string>& digests) {
    std::vector<std::vector<float>> traces;
    for (const auto& prompt : kPrompts) {
      Session session(model_, pool_);
      traces.push_back(test::greedy_trace(session, prompt, kSteps));
      digests.push_back(session.state_digest());
    }
    return traces;
  }

  // A session per prompt, each a member of `batcher`.
  std::vector<std::unique_ptr<Session>> members(StepBatcher& batcher) {
    std::vector<std::unique_ptr<Session>> sessions;
    for (std::size_t i = 0; i < kPrompts.size(); ++i) {
      sessions.push_back(std::make_unique<Session>(model_, pool_));
      sessions.back()->batch_steps_with(&batcher);
      batcher.join();
    }
    return sessions;
  }

  // Runs generate(i) for every prompt at once, each on a thread of its own
  // that leaves the batcher when done.
  static void generate_together(StepBatcher& batcher, const std::function<void(std::size_t)>& generate) {
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < kPrompts.size(); ++i) {
      threads.emplace_back([&, i] {
        generate(i);
        batcher.leave();
      });
    }
    for (auto& thread : threads) thread.join();
  }
};

TEST_F(StepBatcherTest, SessionsDecodingTogetherGetTheTokensTheyGetAlone) {
  std::vector<std::string> solo_digests;
  const auto expected = solo_traces(solo_digests);

  StepBatcher batcher(model_, pool_, kPatientWindow);
  std::vector<std::unique_ptr<Session>> sessions = members(batcher);
  std::vector<std::vector<float>> traces(kPrompts.size());
  generate_together(batcher, [&](std::size_t i) { traces[i] = test::greedy_trace(*sessions[i], kPrompts[i], kSteps); });

  for (std::size_t i = 0; i < kPrompts.size(); ++i) {
    EXPECT_TRUE(test::bit_identical(traces[i], expected[i])) << "prompt " << i;
    EXPECT_EQ(sessions[i]->state_digest(), solo_digests[i]) << "prompt " << i;
  }
  // Every member was in every batch: the prefills, then each decode step.
  const StepBatcher::Stats stats = batcher.stats();
  EXPECT_EQ(stats.batches, static_cast<std::uint64_t>(1 + kSteps));
  EXPECT_EQ(stats.steps, static_cast<std::uint64_t>(kPrompts.size() * (1 + kSteps)));
  EXPECT_EQ(stats.widest, static_cast<int>(kPrompts.size()));
}

// The greedy trace of a prompt; a decode that aborts is run again, as
// generation runs it. Counts the aborts.
std::vector<float> trace_with_retries(Session& session, std::span<const int> prompt, int& aborted) {
  std::vector<float> trace;
  auto step = session.prefill(prompt);
  for (int n = 0; step; ++n) {
    trace.insert(trace.end(), step->logits.begin(), step->logits.end());
    if (n == kSteps) return trace;
    const int token = argmax(step->logits);
    step = session.decode(token);
    if (!step) {
      ++aborted;
      step = session.decode(token);
    }
  }
  ADD_FAILURE() << step.error().message();
  return trace;
}

TEST_F(StepBatcherTest, AnAbortInOneSessionLeavesTheOthersTokensAsTheyWere) {
  // Session 1's fifth transaction fails after its batch computed and wrote
  // its cache; the step is undone and run again, in a later batch.
  const auto fault = [] { return test::fail_once(Phase::OutputPublication, 5); };
  std::vector<std::string> solo_digests;
  const auto expected = solo_traces(solo_digests);
  {
    Session faulted(model_, pool_);
    faulted.set_failure_hook(fault());
    int aborted = 0;
    EXPECT_TRUE(test::bit_identical(trace_with_retries(faulted, kPrompts[1], aborted), expected[1]));
    solo_digests[1] = faulted.state_digest();  // its state epoch counts the aborted transaction
  }

  StepBatcher batcher(model_, pool_, kPatientWindow);
  std::vector<std::unique_ptr<Session>> sessions = members(batcher);
  sessions[1]->set_failure_hook(fault());
  std::vector<std::vector<float>> traces(kPrompts.size());
  std::vector<int> aborted(kPrompts.size(), 0);
  generate_together(batcher,
                    [&](std::size_t i) { traces[i] = trace_with_retries(*sessions[i], kPrompts[i], aborted[i]); });

  EXPECT_EQ(aborted, (std::vector<int>{0, 1, 0, 0}));
  for (std::size_t i = 0; i < kPrompts.size(); ++i) {
    EXPECT_TRUE(test::bit_identical(traces[i], expected[i])) << "prompt " << i;
    EXPECT_EQ(sessions[i]->state_digest(), solo_digests[i]) << "prompt " << i;
  }
  EXPECT_EQ(batcher.stats().steps, static_cast<std::uint64_t>(kPrompts.size() * (1 + kSteps) + 1));
}

TEST_F(StepBatcherTest, LongPrefillsGoInBatchesOfTheirOwn) {
  // Two prompts of 300 tokens: together past kMaxBatchRows.
  std::vector<std::vector<int>> prompts(2, std::vector<int>(300, 300));
  prompts[0][0] = prompts[1][0] = 1;
  prompts[1][5] = 299;
  std::vector<std::vector<float>> expected;
  for (const auto& prompt : prompts) {
    Session alone(model_, pool_);
    expected.push_back(test::greedy_trace(alone, prompt, 2));
  }
  StepBatcher batcher(model_, pool_, kPatientWindow);
  std::vector<std::unique_ptr<Session>> sessions;
  for (int i = 0; i < 2; ++i) {
    sessions.push_back(std::make_unique<Session>(model_, pool_));
    sessions.back()->batch_steps_with(&batcher);
    batcher.join();
  }
  std::vector<std::vector<float>> traces(2);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      traces[i] = test::greedy_trace(*sessions[i], prompts[i], 2);
      batcher.leave();
    });
  }
  for (auto& thread : threads) thread.join();
  for (std::size_t i = 0; i < 2; ++i) EXPECT_TRUE(test::bit_identical(traces[i], expected[i])) << "prompt " << i;
  // The first prefill alone; the second with the first's decode step; then
  // a decode step of each; the second's last alone.
  EXPECT_EQ(batcher.stats().batches, 4u);
  EXPECT_EQ(batcher.stats().steps, 6u);
  EXPECT_EQ(batcher.stats().widest, 2);
}

TEST_F(StepBatcherTest, ABatchWaitsForAMemberAtMostTheWindow) {
  // Two members, one of which never steps: the other's steps still run,
  // each after the (short) window.
  StepBatcher batcher(model_, pool_, std::chrono::milliseconds(1));
  batcher.join();
  batcher.join();
  Session session(model_, pool_);
  session.batch_steps_with(&batcher);
  Session alone(model_, pool_);
  EXPECT_TRUE(
      test::bit_identical(test::greedy_trace(session, kPrompts[0], 3), test::greedy_trace(alone, kPrompts[0], 3)));
  EXPECT_EQ(batcher.stats().batches, 4u);
  EXPECT_EQ(batcher.stats().widest, 1);
}

}  // namespace
}  // namespace accord
