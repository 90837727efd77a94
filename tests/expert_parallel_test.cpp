// Experts spread over ranks (runtime/rank/expert_placement.hpp,
// docs/protocol.md "Expert routes"): where each block's experts go, the
// phases a step runs over the expert routes, the same bits as one rank for
// every placement of the zoo's mixture-of-experts files, and a failure on
// an expert route that aborts or poisons, then heals, like any other.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/distributed_session.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/agreement/transaction_plan.hpp"
#include "runtime/fault/fault_plan.hpp"
#include "runtime/model/identity.hpp"
#include "runtime/model/model.hpp"
#include "runtime/rank/expert_placement.hpp"
#include "runtime/rank/partition.hpp"
#include "runtime/session/session.hpp"
#include "runtime/text/sampler.hpp"
#include "tests/node_process.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

ModelConfig with_experts(int experts) {
  ModelConfig config;
  config.n_experts = experts;
  config.n_experts_used = 2;
  return config;
}

TEST(ExpertPlacementTest, SlicesStayWithTheStageAndGoToTheRanksAfterIt) {
  const Partition partition = Partition::from_counts(4, {1, 1, 1, 1}).value();
  auto placement = ExpertPlacement::make(partition, with_experts(8), 2);
  ASSERT_TRUE(placement) << placement.error().message();
  for (int expert = 0; expert < 8; ++expert) {
    EXPECT_EQ(placement->holder(0, expert), expert < 4 ? 0 : 1) << expert;
    EXPECT_EQ(placement->holder(3, expert), expert < 4 ? 3 : 0) << expert;  // wraps to rank 0
  }
  EXPECT_EQ(placement->helpers(3), std::vector<int>{0});
  EXPECT_EQ(placement->helped_stages(0), std::vector<int>{3});
  EXPECT_EQ(placement->held(2, 3), (ExpertRange{4, 4}));
  EXPECT_EQ(placement->held(2, 0).count, 0);
  // Slices as equal as can be, the larger first.
  auto three = ExpertPlacement::make(partition, with_experts(8), 3).value();
  EXPECT_EQ(three.held(0, 0), (ExpertRange{0, 3}));
  EXPECT_EQ(three.held(0, 1), (ExpertRange{3, 3}));
  EXPECT_EQ(three.held(0, 2), (ExpertRange{6, 2}));
  EXPECT_EQ(three.helpers(1), (std::vector<int>{2, 3}));
}

TEST(ExpertPlacementTest, WhatCannotSpreadIsRefusedNamingTheOption) {
  const Partition partition = Partition::from_counts(4, {2, 2}).value();
  for (const auto& [config, spread, says] :
       {std::tuple{with_experts(0), 2, "no experts"}, std::tuple{with_experts(4), 3, "needs at least 3 ranks"},
        std::tuple{with_experts(1), 2, "more than the model's 1 experts"},
        std::tuple{with_experts(4), 0, "at least 1"}}) {
    auto placement = ExpertPlacement::make(partition, config, spread);
    ASSERT_FALSE(placement) << spread;
    EXPECT_NE(placement.error().message().find("--expert-ranks"), std::string::npos) << placement.error().message();
    EXPECT_NE(placement.error().message().find(says), std::string::npos) << placement.error().message();
  }
}

// Each stage's expert routes come before its pipeline route: its units run
// (and its helpers serve them) in the first, and the activations go on.
TEST(ExpertRoutesTest, AStepRunsEachStagesExpertRoutesBeforeItsActivationsGoOn) {
  ForwardStepRequest step;
  step.tokens = {1};
  std::vector<std::string> names;
  for (const PhaseId& phase : phases_of(TransactionRequest{step}, SessionRanks{3, 2}))
    names.push_back(to_string(phase));
  const std::vector<std::string> expected = {"StateCheckpoint",
                                             "BoundarySourceCompletion(0->1,experts)",
                                             "BoundarySourceReady(1->0,experts)",
                                             "BoundarySourceCompletion(0->1)",
                                             "BoundarySourceReady(0->1)",
                                             "BoundarySourceCompletion(1->2,experts)",
                                             "BoundarySourceReady(2->1,experts)",
                                             "BoundarySourceCompletion(1->2)",
                                             "BoundarySourceReady(1->2)",
                                             "BoundarySourceCompletion(2->0,experts)",
                                             "BoundarySourceReady(0->2,experts)",
                                             "Execution",
                                             "OutputObservation",
                                             "OutputPublication",
                                             "MechanismCompletion",
                                             "Commit"};
  EXPECT_EQ(names, expected);
  auto fault = parse_fault("2:BoundarySourceCompletion(2->0,experts):exit:1");
  ASSERT_TRUE(fault) << fault.error().message();
  EXPECT_TRUE(check_fault_plan({*fault}, 3, 2));
  EXPECT_FALSE(check_fault_plan({*fault}, 3, 1)) << "no expert route without experts spread";
}

constexpr int kSteps = 12;
const std::vector<int> kPrompt = {1, 450, 4996, 17354, 1701, 29916, 432, 17204};

// The logits of the prompt's rows and of `kSteps` greedy decode steps after it.
template <class AnySession>
std::vector<float> greedy_logits(AnySession& session, int vocab) {
  std::vector<float> all;
  auto step = session.step({.tokens = kPrompt, .all_rows = true});
  for (int s = 0; step && s < kSteps; ++s) {
    all.insert(all.end(), step->logits.begin(), step->logits.end());
    const std::span<const float> last(step->logits.end() - vocab, step->logits.end());
    step = session.decode(argmax(last));
  }
  EXPECT_TRUE(step) << step.error().message();
  return all;
}

// Sessions over one model whose experts spread over in-process ranks.
class SpreadExperts : public testing::Test {
 protected:
  void load(const std::filesystem::path& path) {
    auto model = Model::load(path.string());
    ASSERT_TRUE(model) << model.error().message();
    model_ = std::make_unique<Model>(std::move(*model));
  }

  std::unique_ptr<DistributedSession> spread(int ranks, int expert_ranks, std::vector<Fault> faults = {}) {
    DistributedOptions options;
    options.ranks = ranks;
    options.expert_ranks = expert_ranks;
    options.threads = 2;
    options.faults = std::move(faults);
    auto session = DistributedSession::create(*model_, options);
    EXPECT_TRUE(session) << session.error().message();
    return session ? std::move(*session) : nullptr;
  }

  // One rank's logits (greedy_logits).
  std::vector<float> one_ranks_logits() {
    Session one(*model_, pool_);
    return greedy_logits(one, vocab());
  }
  int vocab() const { return model_->config().vocab_size; }

  // The same bits as one rank for each (ranks, expert ranks), and the same
  // rows for each expert: the report's counts, summed over the ranks, are
  // one rank's, and every rank computed some.
  void expect_one_ranks_bits(const std::vector<std::pair<int, int>>& placements) {
    Session one(*model_, pool_);
    const std::vector<float> expected = greedy_logits(one, vocab());
    ASSERT_FALSE(expected.empty());
    const auto one_rank_rows = one.report().expert_rows;
    ASSERT_EQ(one_rank_rows.size(), 1u);
    for (const auto& [ranks, expert_ranks] : placements) {
      auto session = spread(ranks, expert_ranks);
      ASSERT_NE(session, nullptr);
      EXPECT_TRUE(test::bit_identical(greedy_logits(*session, vocab()), expected))
          << ranks << " ranks, experts over " << expert_ranks;
      auto report = session->report();
      ASSERT_TRUE(report) << report.error().message();
      ASSERT_EQ(report->expert_rows.size(), static_cast<std::size_t>(ranks));
      std::vector<std::uint64_t> summed(one_rank_rows[0].size());
      for (const auto& rank_rows : report->expert_rows) {
        ASSERT_EQ(rank_rows.size(), summed.size());
        std::uint64_t rank_total = 0;
        for (std::size_t e = 0; e < summed.size(); ++e) {
          summed[e] += rank_rows[e];
          rank_total += rank_rows[e];
        }
        EXPECT_GT(rank_total, 0u);
      }
      EXPECT_EQ(summed, one_rank_rows[0]) << ranks << " ranks, experts over " << expert_ranks;
    }
  }

  std::unique_ptr<Model> model_;
  cpu::ThreadPool pool_{2};
};

// The zoo's mixture-of-experts files (three blocks each).
class ExpertParallel : public SpreadExperts, public testing::WithParamInterface<const char*> {
 protected:
  void SetUp() override { load(test::shared_dir() / "models" / "zoo" / GetParam()); }
};

TEST_P(ExpertParallel, EveryPlacementGivesOneRanksBits) { expect_one_ranks_bits({{2, 2}, {3, 2}, {3, 3}}); }

// Four blocks of eight experts (tests/zoo/make_zoo_f32.sh writes them):
// four ranks, the experts over two, three or all four of them.
TEST_F(SpreadExperts, FourRanksZooF32GiveOneRanksBits) {
  load(test::zoo_f32_dir() / "four-blocks" / "qwen3moe-f32.gguf");
  expect_one_ranks_bits({{4, 2}, {4, 3}, {4, 4}});
}

// A helper that fails while it serves aborts the step: every rank restores,
// and the session goes on with one rank's bits.
TEST_P(ExpertParallel, AHelperThatFailsAbortsTheStepAndNothingChanges) {
  const std::vector<float> expected = one_ranks_logits();
  auto session = spread(3, 3, {parse_fault("2:BoundarySourceCompletion(1->2,experts):error:1").value()});
  ASSERT_NE(session, nullptr);
  auto before = session->checkpoint();
  ASSERT_TRUE(before) << before.error().message();
  auto failed = session->step({.tokens = kPrompt, .all_rows = true});
  ASSERT_FALSE(failed);
  EXPECT_NE(failed.error().message().find("BoundarySourceCompletion(1->2,experts)"), std::string::npos)
      << failed.error().message();
  auto after = session->checkpoint();
  ASSERT_TRUE(after) << after.error().message();
  EXPECT_EQ(after->position, 0);
  EXPECT_EQ(after->rank_digests, before->rank_digests);
  EXPECT_TRUE(test::bit_identical(greedy_logits(*session, vocab()), expected));
}

// A helper lost in the middle of a stage's units poisons the session;
// healing starts it afresh and the tokens go on as one rank's.
TEST_P(ExpertParallel, ALostHelperPoisonsAndHealingBringsItBack) {
  const std::vector<float> expected = one_ranks_logits();
  auto session = spread(3, 2, {parse_fault("1:BoundarySourceCompletion(0->1,experts):exit:3").value()});
  ASSERT_NE(session, nullptr);
  std::vector<float> logits;
  std::vector<int> committed = kPrompt;
  auto step = session->step({.tokens = kPrompt, .all_rows = true});
  const int vocab = this->vocab();
  int heals = 0;
  while (static_cast<int>(committed.size()) < static_cast<int>(kPrompt.size()) + kSteps) {
    if (!step) {
      ASSERT_EQ(heals++, 0) << step.error().message();
      auto healed = session->heal();
      ASSERT_TRUE(healed) << healed.error().message();
      step = session->decode(committed.back());
      continue;
    }
    logits.insert(logits.end(), step->logits.end() - vocab, step->logits.end());
    committed.push_back(argmax(std::span<const float>(step->logits.end() - vocab, step->logits.end())));
    step = session->decode(committed.back());
  }
  EXPECT_EQ(heals, 1);
  std::vector<float> last_rows;  // one rank's, the last row of each step
  const std::size_t prompt_rows = kPrompt.size() * static_cast<std::size_t>(vocab);
  last_rows.insert(last_rows.end(), expected.begin() + static_cast<std::ptrdiff_t>(prompt_rows - vocab),
                   expected.begin() + static_cast<std::ptrdiff_t>(prompt_rows));
  last_rows.insert(last_rows.end(), expected.begin() + static_cast<std::ptrdiff_t>(prompt_rows), expected.end());
  EXPECT_TRUE(test::bit_identical(logits, last_rows));
}

// Three `accord node` processes, each block's experts over all three, give
// one rank's bits. Each node keeps a third of every block's experts: its
// weight share counts only those, and the others' pages are never mapped
// in (docs/residency.md).
TEST_P(ExpertParallel, ThreeNodesWithTheExpertsSpreadGiveOneRanksBits) {
  test::TempDir logs;
  std::vector<std::unique_ptr<test::NodeProcess>> nodes;
  std::vector<NodeAddress> peers;
  const auto zoo = test::shared_dir() / "models" / "zoo";
  for (int r = 0; r < 3; ++r) {
    nodes.push_back(std::make_unique<test::NodeProcess>(logs, std::vector<std::string>{"--model-dir", zoo.string()}));
    ASSERT_NE(nodes.back()->port(), 0) << nodes.back()->log();
    peers.push_back(nodes.back()->address());
  }
  DistributedOptions options;
  options.expert_ranks = 3;
  auto remote = DistributedSession::connect(peers, *model_, options);
  ASSERT_TRUE(remote) << remote.error().message();
  EXPECT_TRUE(test::bit_identical(greedy_logits(**remote, vocab()), one_ranks_logits()));
  auto states = (*remote)->rank_states();
  ASSERT_TRUE(states) << states.error().message();
  const Partition partition = Partition::by_weight(*model_, 3).value();
  const int experts = model_->config().n_experts;
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(partition.range(r).count, 1);  // rank r runs block r
    const WeightShare& share = (*states)[static_cast<std::size_t>(r)].weights;
    // From the file's tensor table: the rank's block without its experts,
    // then its slice of each block's: slice (r - block) mod 3 of the
    // experts, as equal as can be, the larger first.
    std::uint64_t expected = 0;
    for (const auto& [type, bytes] : model_->weight_bytes_by_type(partition.scope(r))) expected += bytes;
    for (const StoredTensor& t : model_->tensors()) {
      if (!t.name.ends_with("_exps.weight")) continue;
      const int block = std::stoi(t.name.substr(4));  // "blk.N."
      const int j = (r - block + 3) % 3;
      const int held = experts / 3 + (j < experts % 3 ? 1 : 0);
      if (block == r) expected -= t.bytes;
      expected += t.bytes / static_cast<std::uint64_t>(experts) * static_cast<std::uint64_t>(held);
    }
    EXPECT_EQ(share.bytes, expected) << "rank " << r;
    // Only the pages at the edges of its slices lie beside its own.
    EXPECT_LE(share.resident_bytes, share.bytes + 3 * 3 * 2 * 4096u) << "rank " << r;
  }
}

// A rank holding a slice of each block's experts reads and digests only
// that slice: a digest for each expert it holds, none for the others';
// the ranks' digests together are the whole model's, and the rest of each
// stack is never mapped in.
TEST_P(ExpertParallel, EachRankDigestsOnlyItsExpertsAndTheRanksMakeTheWholeModel) {
  const ModelConfig& c = model_->config();
  const Partition partition = Partition::by_weight(*model_, 3).value();
  const ExpertPlacement placement = ExpertPlacement::make(partition, c, 3).value();
  const auto path = (test::shared_dir() / "models" / "zoo" / GetParam()).string();
  std::vector<std::string> digests(digest_count(c));
  for (int r = 0; r < 3; ++r) {
    const WeightScope scope = placement.scope(partition, r);
    auto shard = Model::load(path, {scope, 1});
    ASSERT_TRUE(shard) << shard.error().message();
    std::vector<std::string> experts_digested;
    for (std::size_t i = 0; i < digests.size(); ++i) {
      const std::string name = digest_name(c, i);
      if (!shard->tensor_digests()[i].empty() && name.starts_with("expert ")) experts_digested.push_back(name);
    }
    std::vector<std::string> experts_held;
    for (int unit = 0; unit < c.n_layers; ++unit) {
      const ExpertRange held = placement.held(unit, r);
      for (const char* stack : {"w1", "w2", "w3"}) {
        for (int e = held.first; e < held.end(); ++e) {
          experts_held.push_back("expert " + std::to_string(e) + " of " + stack + " of layer " + std::to_string(unit));
        }
      }
    }
    std::sort(experts_digested.begin(), experts_digested.end());
    std::sort(experts_held.begin(), experts_held.end());
    EXPECT_EQ(experts_digested, experts_held) << "rank " << r;
    EXPECT_FALSE(merge_digests(digests, shard->tensor_digests())) << "rank " << r << " disagrees with another";
    std::uint64_t held_bytes = shard->owned_floats() * sizeof(float);
    for (const auto& [type, bytes] : shard->weight_bytes_by_type(scope)) held_bytes += bytes;
    EXPECT_LE(shard->resident_bytes(), held_bytes + 2 * 4096u * shard->file_ranges(scope).size()) << "rank " << r;
  }
  EXPECT_EQ(digests, model_->tensor_digests());
  auto identity = combine_identity(c, digests);
  ASSERT_TRUE(identity) << identity.error().message();
  EXPECT_EQ(*identity, model_->identity());
}

INSTANTIATE_TEST_SUITE_P(Files, ExpertParallel, testing::Values("mixtral-Q4_K_M.gguf", "qwen3moe-Q4_K_M.gguf"));

}  // namespace
}  // namespace accord
