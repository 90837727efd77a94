// Pipeline partitions: N rank stages that hand activations along give the
// logits of one rank bit for bit (docs/invariants.md, invariant 1), for
// every N up to one unit per rank.
#include <gtest/gtest.h>

#include <memory>

#include "runtime/rank/rank_stage.hpp"
#include "runtime/session/session.hpp"
#include "runtime/text/sampler.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

TEST(Partition, BalancedRangesAreContiguousAndLargerFirst) {
  auto p = Partition::balanced(5, 3);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->range(0), (UnitRange{0, 2}));
  EXPECT_EQ(p->range(1), (UnitRange{2, 2}));
  EXPECT_EQ(p->range(2), (UnitRange{4, 1}));
  EXPECT_TRUE(p->is_first(0));
  EXPECT_TRUE(p->is_output_owner(2));
  EXPECT_FALSE(p->is_output_owner(1));
  EXPECT_EQ(Partition::balanced(12, 4)->range(3), (UnitRange{9, 3}));
}

TEST(Partition, RefusesImpossibleSplits) {
  EXPECT_FALSE(Partition::balanced(5, 6));
  EXPECT_FALSE(Partition::balanced(5, 0));
  EXPECT_FALSE(Partition::from_counts(5, {2, 2}));
  EXPECT_FALSE(Partition::from_counts(5, {5, 0}));
  auto custom = Partition::from_counts(5, {1, 4});
  ASSERT_TRUE(custom);
  EXPECT_EQ(custom->range(1), (UnitRange{1, 4}));
}

// N stages in one process, moving activations by hand; returns the logits
// of the prompt's last token and of `steps` greedy decode steps.
std::vector<float> pipeline_trace(const Model& model, const Partition& partition, std::span<const int> prompt,
                                  int steps) {
  cpu::ThreadPool pool(2);
  std::vector<std::unique_ptr<RankStage>> stages;
  for (int r = 0; r < partition.ranks(); ++r) stages.push_back(std::make_unique<RankStage>(model, pool, partition, r));
  std::vector<float> trace;
  std::uint64_t epoch = 0;
  auto step = [&](std::span<const int> tokens) {
    std::vector<float> activations;
    for (auto& stage : stages) {
      EXPECT_TRUE(stage->check_step(tokens, activations));
      EXPECT_TRUE(stage->execute(tokens, activations, nullptr));
      const auto out = stage->activations();
      activations.assign(out.begin(), out.end());
    }
    const auto logits = stages.back()->logits(Transformer::Rows::last);
    trace.insert(trace.end(), logits.begin(), logits.end());
    ++epoch;
    for (auto& stage : stages) stage->state().commit_rows(stage->state().position(), tokens, epoch);
    return argmax(logits);
  };
  int next = step(prompt);
  for (int i = 0; i < steps; ++i) next = step(std::span<const int>(&next, 1));
  return trace;
}

std::vector<float> session_trace(const Model& model, std::span<const int> prompt, int steps) {
  cpu::ThreadPool pool(2);
  Session session(model, pool);
  std::vector<float> trace;
  auto step = session.prefill(prompt);
  for (int i = 0;; ++i) {
    trace.insert(trace.end(), step->logits.begin(), step->logits.end());
    if (i == steps) break;
    step = session.decode(argmax(step->logits));
  }
  return trace;
}

TEST(Pipeline, OneToFiveRanksGiveTheLogitsOfOneRankOnStories) {
  const Model model = test::load_stories_model();
  const std::vector<int> prompt = {1, 403, 407, 261, 378};
  const auto expected = session_trace(model, prompt, 12);
  for (int ranks = 1; ranks <= 5; ++ranks) {
    const auto got = pipeline_trace(model, Partition::balanced(5, ranks).value(), prompt, 12);
    EXPECT_TRUE(test::bit_identical(got, expected)) << ranks << " ranks";
  }
}

TEST(Pipeline, UnevenPartitionsOfASyntheticModelAgree) {
  test::TempDir dir;
  ModelConfig c = test::small_config();
  c.n_layers = 6;
  const Model model = test::synthetic_model(dir, {c, 8, llama2c::Layout::legacy});
  const std::vector<int> prompt = {1, 20, 30, 40};
  const auto expected = session_trace(model, prompt, 6);
  for (const auto& counts : std::vector<std::vector<int>>{{6}, {1, 5}, {3, 3}, {1, 1, 4}, {2, 1, 2, 1}}) {
    const auto got = pipeline_trace(model, Partition::from_counts(6, counts).value(), prompt, 6);
    EXPECT_TRUE(test::bit_identical(got, expected)) << counts.size() << " ranks";
  }
}

TEST(Pipeline, ALaterRankRefusesActivationsOfTheWrongShape) {
  const Model model = test::load_stories_model();
  cpu::ThreadPool pool(1);
  const auto partition = Partition::balanced(5, 2).value();
  RankStage second(model, pool, partition, 1);
  const std::vector<int> tokens = {1, 2};
  const std::vector<float> one_row(64);
  Status refused = second.check_step(tokens, one_row);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("expected activations of 2 rows"), std::string::npos);
  EXPECT_EQ(second.state().position(), 0);
}

}  // namespace
}  // namespace accord
