// The distributed session: N in-process ranks of CAF actors agree on every
// phase and give the tokens and logits of one rank (DESIGN.md invariant 1);
// checkpoints, rollback and reset run on every rank; a failed phase aborts
// everywhere; a rank that is gone poisons the session.
#include "actors/distributed_session.hpp"

#include <gtest/gtest.h>

#include "runtime/model/sampler.hpp"
#include "tests/reference.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

std::unique_ptr<DistributedSession> make_session(const Model& model, int ranks, std::vector<int> counts = {}) {
  DistributedOptions options;
  options.ranks = ranks;
  options.unit_counts = std::move(counts);
  auto session = DistributedSession::create(model, options);
  if (!session) {
    ADD_FAILURE() << session.error().message();
    return nullptr;
  }
  return std::move(*session);
}

// Logits of the prefill and of `steps` greedy decode steps.
std::vector<float> distributed_trace(DistributedSession& session, std::span<const int> prompt, int steps) {
  std::vector<float> trace;
  auto step = session.prefill(prompt);
  for (int i = 0;; ++i) {
    EXPECT_TRUE(step) << step.error().message();
    if (!step) return trace;
    trace.insert(trace.end(), step->logits.begin(), step->logits.end());
    if (i == steps) return trace;
    step = session.decode(argmax(step->logits));
  }
}

std::vector<float> single_rank_trace(const Model& model, std::span<const int> prompt, int steps) {
  cpu::ThreadPool pool(1);
  Session session(model, pool);
  std::vector<float> trace;
  auto step = session.prefill(prompt);
  for (int i = 0;; ++i) {
    trace.insert(trace.end(), step->logits.begin(), step->logits.end());
    if (i == steps) return trace;
    step = session.decode(argmax(step->logits));
  }
}

TEST(DistributedSession, OneToFiveRanksMatchRunCAndOneRank) {
  const Model model = test::load_stories_model();
  const auto reference = test::greedy_cases().at(1);  // "Once upon a time"
  const int steps = static_cast<int>(reference.generated_tokens.size()) - 1;
  const auto expected = single_rank_trace(model, reference.prompt_tokens, steps);
  for (int ranks = 1; ranks <= 5; ++ranks) {
    auto session = make_session(model, ranks);
    ASSERT_TRUE(session);
    EXPECT_EQ(session->ranks(), ranks);
    const auto trace = distributed_trace(*session, reference.prompt_tokens, steps);
    EXPECT_TRUE(test::bit_identical(trace, expected)) << ranks << " ranks";
    std::vector<int> tokens;
    for (std::size_t row = 0; row * 512 < trace.size(); ++row) {
      tokens.push_back(argmax(std::span<const float>(trace).subspan(row * 512, 512)));
    }
    EXPECT_EQ(tokens, reference.generated_tokens) << ranks << " ranks";
  }
}

TEST(DistributedSession, UnevenPartitionsOfASyntheticModelAgree) {
  test::TempDir dir;
  ModelConfig c = test::small_config();
  c.n_layers = 6;
  const Model model = test::synthetic_model(dir, {c, 9, llama2c::Layout::legacy});
  const std::vector<int> prompt = {1, 20, 30, 40, 50};
  const auto expected = single_rank_trace(model, prompt, 5);
  for (const auto& counts : std::vector<std::vector<int>>{{1, 5}, {2, 2, 2}, {3, 1, 1, 1}}) {
    auto session = make_session(model, static_cast<int>(counts.size()), counts);
    ASSERT_TRUE(session);
    EXPECT_TRUE(test::bit_identical(distributed_trace(*session, prompt, 5), expected)) << counts.size() << " ranks";
  }
}

TEST(DistributedSession, ForwardReturnsEveryRow) {
  const Model model = test::load_stories_model();
  auto session = make_session(model, 3);
  const std::vector<int> prompt = {1, 403, 407};
  auto all = session->forward(prompt);
  ASSERT_TRUE(all) << all.error().message();
  EXPECT_EQ(all->rows, 3);
  EXPECT_EQ(all->logits.size(), 3u * 512);
  EXPECT_EQ(session->position(), 3);
}

TEST(DistributedSession, CheckpointRollbackAndResetRunOnEveryRank) {
  const Model model = test::load_stories_model();
  auto session = make_session(model, 3);
  const std::vector<int> prompt = {1, 403, 407, 261, 378};
  ASSERT_TRUE(session->prefill(prompt));
  auto checkpoint = session->checkpoint_distributed();
  ASSERT_TRUE(checkpoint) << checkpoint.error().message();
  EXPECT_EQ(checkpoint->position, 5);
  ASSERT_EQ(checkpoint->rank_digests.size(), 3u);
  std::vector<std::vector<float>> first;
  for (int token : {432, 383, 286}) first.push_back(session->decode(token)->logits);

  ASSERT_TRUE(session->rollback_distributed(*checkpoint));
  EXPECT_EQ(session->position(), 5);
  auto again = session->checkpoint_distributed();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->rank_digests, checkpoint->rank_digests);
  int i = 0;
  for (int token : {432, 383, 286}) EXPECT_TRUE(test::bit_identical(session->decode(token)->logits, first[i++]));

  // Rewriting a row below a later checkpoint makes it unprovable: every
  // rank refuses, the transaction aborts, and the session goes on.
  auto late = session->checkpoint_distributed();
  ASSERT_TRUE(session->rollback_distributed(*checkpoint));
  ASSERT_TRUE(session->decode(99));
  Status refused = session->rollback_distributed(*late);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), ErrorCode::state);
  EXPECT_NE(refused.error().message().find("overwritten"), std::string::npos);
  EXPECT_EQ(refused.error().phase(), "SessionRollbackPreparation");
  EXPECT_TRUE(session->decode(5));

  ASSERT_TRUE(session->reset_distributed());
  EXPECT_EQ(session->position(), 0);
  EXPECT_FALSE(session->rollback_distributed(*checkpoint)) << "checkpoints do not survive a reset";
  const auto fresh = single_rank_trace(model, prompt, 0);
  EXPECT_TRUE(test::bit_identical(session->prefill(prompt)->logits, fresh));
}

TEST(DistributedSession, BadInputIsRefusedBeforeAnyRankChanges) {
  const Model model = test::load_stories_model();
  auto session = make_session(model, 2);
  ASSERT_TRUE(session->prefill(std::vector<int>{1, 403}));
  auto bad = session->decode(512);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), ErrorCode::contract);
  EXPECT_TRUE(bad.error().before_state_mutation());
  EXPECT_EQ(session->position(), 2);
  EXPECT_TRUE(session->decode(407));
}

TEST(DistributedSession, ARankThatIsGonePoisonsTheSession) {
  const Model model = test::load_stories_model();
  DistributedOptions options;
  options.ranks = 3;
  options.phase_timeout_ms = 200;
  auto created = DistributedSession::create(model, options);
  ASSERT_TRUE(created);
  auto& session = **created;
  ASSERT_TRUE(session.prefill(std::vector<int>{1, 403}));
  ASSERT_TRUE(session.stop_rank(1));
  // Whether the down message or the deadline reaches the coordinator
  // first, the step cannot commit and the session is poisoned.
  auto step = session.decode(407);
  ASSERT_FALSE(step);
  EXPECT_EQ(step.error().code(), ErrorCode::commit_indeterminate);
  EXPECT_NE(step.error().message().find("poisoned"), std::string::npos) << step.error().message();
  EXPECT_NE(step.error().message().find("rank 1"), std::string::npos) << step.error().message();
  // Every later call fails at once with the cause; a reset needs rank 1.
  auto again = session.decode(407);
  ASSERT_FALSE(again);
  EXPECT_NE(again.error().message().find("poisoned"), std::string::npos);
  Status reset = session.reset_distributed();
  ASSERT_FALSE(reset);
  EXPECT_NE(reset.error().message().find("rank 1"), std::string::npos) << reset.error().message();
}

}  // namespace
}  // namespace accord
