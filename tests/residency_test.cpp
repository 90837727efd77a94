// Shard-local materialization, per-tensor identity and layered residency
// (docs/residency.md): a rank reads only its tensors, the shards' digests
// make the whole model's identity, and a budget changes no output.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "actors/distributed_session.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/model/gguf.hpp"
#include "runtime/model/gguf_model.hpp"
#include "runtime/model/identity.hpp"
#include "runtime/model/residency.hpp"
#include "runtime/model/weights.hpp"
#include "runtime/rank/partition.hpp"
#include "runtime/session/session.hpp"
#include "runtime/text/sampler.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

// A stage on the CPU whose weights are layered within `bytes`.
StageOptions weights_budget(std::uint64_t bytes) {
  StageOptions options;
  options.max_resident_bytes = bytes;
  return options;
}

const std::vector<int> kPrompt = {1, 403, 407, 261, 30};

std::size_t page() { return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)); }

// Writes dir/m.bin: a model whose tensors span many pages, so what is
// mapped shows. Returns it loaded whole.
Model paged_model(const test::TempDir& dir, bool shared_classifier = true) {
  SyntheticModelOptions synthetic;
  synthetic.config = test::small_config();
  synthetic.config.dim = 256;
  synthetic.config.hidden_dim = 512;
  synthetic.config.n_layers = 4;
  synthetic.config.n_heads = synthetic.config.n_kv_heads = 4;
  synthetic.config.vocab_size = 512;
  synthetic.config.shared_classifier = shared_classifier;
  return test::synthetic_model(dir, synthetic);
}

std::uint64_t total(const std::map<std::string, std::uint64_t>& bytes_by_type) {
  std::uint64_t sum = 0;
  for (const auto& [type, bytes] : bytes_by_type) sum += bytes;
  return sum;
}

// The shards of `ranks` ranks, read one at a time, put together.
std::vector<std::string> digests_of_shards(const std::string& path, int ranks) {
  const Model whole = Model::load(path).value();
  const Partition partition = Partition::balanced(whole.config().n_layers, ranks).value();
  std::vector<std::string> digests(digest_count(whole.config()));
  for (int r = 0; r < ranks; ++r) {
    auto shard = Model::load(path, {partition.scope(r), 2});
    EXPECT_TRUE(shard) << shard.error().message();
    if (!shard) return {};
    EXPECT_EQ(shard->identity().empty(), ranks > 1) << "only the whole model has an identity of its own";
    EXPECT_FALSE(merge_digests(digests, shard->tensor_digests())) << "two ranks disagree on a tensor they share";
  }
  return digests;
}

TEST(ShardIdentity, TheShardsOfEveryPartitionMakeTheWholeModelsIdentityInBothFormats) {
  test::TempDir dir;
  const Model bin = test::load_stories_model();
  ASSERT_TRUE(write_gguf_model(dir.file("m.gguf"), bin, llama_metadata(bin.config()), gguf::TensorType::f32));
  for (const std::string& path : {test::stories_model(), dir.file("m.gguf")}) {
    for (int ranks : {1, 2, 3, 5}) {
      const auto digests = digests_of_shards(path, ranks);
      EXPECT_EQ(digests, bin.tensor_digests()) << path << " over " << ranks;
      auto identity = combine_identity(bin.config(), digests);
      ASSERT_TRUE(identity) << identity.error().message();
      EXPECT_EQ(*identity, bin.identity()) << path << " over " << ranks;
    }
  }
}

TEST(ShardIdentity, DigestsOnSeveralThreadsAreThoseOfOne) {
  const Model one = Model::load(test::stories_model(), {WeightScope::everything(), 1}).value();
  const Model four = Model::load(test::stories_model(), {WeightScope::everything(), 4}).value();
  EXPECT_EQ(one.tensor_digests(), four.tensor_digests());
  EXPECT_EQ(one.identity(), four.identity());
}

TEST(ShardIdentity, AMissingOrDisagreeingDigestIsRefused) {
  const Model model = test::load_stories_model();
  std::vector<std::string> digests = model.tensor_digests();
  digests[3].clear();
  auto identity = combine_identity(model.config(), digests);
  ASSERT_FALSE(identity);
  EXPECT_NE(identity.error().message().find("no digest of wk of layer 0"), std::string::npos)
      << identity.error().message();
  std::vector<std::string> other(digests.size());
  other[0] = std::string(32, 'f');
  std::vector<std::string> merged = model.tensor_digests();
  EXPECT_EQ(merge_digests(merged, other), std::optional<std::size_t>(0));
  EXPECT_EQ(merged, model.tensor_digests()) << "a refused merge changes nothing";
  EXPECT_EQ(digest_name(model.config(), 0), "the token embedding");
}

TEST(ShardLoad, ReadsOnlyItsOwnTensors) {
  test::TempDir dir;
  paged_model(dir);
  const WeightScope layer2{false, 2, 1, false};
  auto shard = Model::load(dir.file("m.bin"), {layer2, 1});
  ASSERT_TRUE(shard) << shard.error().message();
  const std::uint64_t layer_bytes = total(shard->weight_bytes_by_type(layer2));
  EXPECT_GE(shard->resident_bytes(layer2), layer_bytes) << "digesting the shard maps it";
  // llama2.c stacks each kind of tensor over the layers, so a page may hold
  // the end of one layer's tensor and the start of the next one's: at most
  // one page of each of the neighbours' nine tensors, none of the others',
  // although the kernel maps a faulting page's neighbours too.
  EXPECT_LE(shard->resident_bytes({false, 1, 1, false}), 9 * page());
  EXPECT_LE(shard->resident_bytes({false, 3, 1, false}), 9 * page());
  // The norms of all layers share their pages (a layer's are 1 KiB).
  EXPECT_LE(shard->resident_bytes({false, 0, 1, false}), 2 * page());
  EXPECT_LE(shard->resident_bytes({true, 0, 0, false}), page()) << "the embedding's page shared with the norms";
  EXPECT_LE(shard->resident_bytes(), layer_bytes + 2 * 9 * page());
}

TEST(ShardLoad, TheEmbeddingRankZeroOnlyLooksUpIsLetGoOnceDigested) {
  test::TempDir dir;
  paged_model(dir);
  const WeightScope first{true, 0, 1, false};
  auto shard = Model::load(dir.file("m.bin"), {first, 1});
  ASSERT_TRUE(shard) << shard.error().message();
  const WeightScope embedding{true, 0, 0, false};
  EXPECT_GT(total(shard->weight_bytes_by_type(embedding)), 100 * page());
  EXPECT_LE(shard->resident_bytes(embedding), 2 * page()) << "the pages it shares with the header and the norms";
  EXPECT_FALSE(shard->tensor_digests()[0].empty()) << "yet it was digested";
}

TEST(ShardLoad, AnEmbeddingThatIsNotTheClassifierKeepsNoRowsItLookedUp) {
  test::TempDir dir;
  const Model model = paged_model(dir, false);
  cpu::ThreadPool pool(1);
  Session session(model, pool);
  ASSERT_TRUE(session.prefill(std::vector<int>{1, 100, 200, 300, 400}));
  ASSERT_TRUE(session.decode(5));
  const WeightScope embedding{true, 0, 0, false};
  EXPECT_LE(model.resident_bytes(embedding), 2 * page()) << "the pages it shares with the header and the norms";
  EXPECT_GE(model.resident_bytes({false, 0, 0, true}), total(model.weight_bytes_by_type({false, 0, 0, true})))
      << "the classifier stays";
}

TEST(ShardLoad, ADamagedWeightFailsOnlyTheShardThatHoldsIt) {
  test::TempDir dir;
  const Model model = paged_model(dir);
  std::uint64_t wq_offset = 0;
  for (const StoredTensor& t : model.tensors()) {
    if (t.name == "wq") wq_offset = t.offset;
  }
  ASSERT_NE(wq_offset, 0u);
  auto bytes = test::read_bytes(dir.file("m.bin"));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(bytes.data() + wq_offset, &nan, sizeof nan);  // layer 0's first value
  test::write_bytes(dir.file("bad.bin"), bytes);
  EXPECT_TRUE(Model::load(dir.file("bad.bin"), {{false, 1, 3, true}, 1}));
  auto holder = Model::load(dir.file("bad.bin"), {{true, 0, 1, false}, 1});
  ASSERT_FALSE(holder);
  EXPECT_NE(holder.error().message().find("wq (layer 0)"), std::string::npos) << holder.error().message();
}

TEST(WeightPartition, BalancesTheBytesEachRankKeeps) {
  // Equal units and a head of three: the last rank takes fewer units.
  const std::vector<std::uint64_t> twelve(12, 10);
  auto p = Partition::by_weight(twelve, 35, 3);
  ASSERT_TRUE(p) << p.error().message();
  EXPECT_EQ(p->range(0), (UnitRange{0, 5}));
  EXPECT_EQ(p->range(1), (UnitRange{5, 5}));
  EXPECT_EQ(p->range(2), (UnitRange{10, 2}));
  // A light head: as balanced, the larger ranges first.
  for (int ranks : {1, 2, 3, 4, 5}) {
    auto by_weight = Partition::by_weight(std::vector<std::uint64_t>(5, 100), 10, ranks);
    auto balanced = Partition::balanced(5, ranks);
    ASSERT_TRUE(by_weight && balanced);
    for (int r = 0; r < ranks; ++r) EXPECT_EQ(by_weight->range(r), balanced->range(r)) << ranks << " ranks";
  }
  // Every rank keeps at least one unit, however heavy the head.
  auto heavy = Partition::by_weight(std::vector<std::uint64_t>(4, 1), 1000, 4);
  ASSERT_TRUE(heavy);
  EXPECT_EQ(heavy->range(3), (UnitRange{3, 1}));
  EXPECT_FALSE(Partition::by_weight(std::vector<std::uint64_t>(2, 1), 1, 3));
}

// --- layered residency ---------------------------------------------------------

class LayeredResidencyTest : public ::testing::Test {
 protected:
  std::uint64_t weights() const { return total(model_.weight_bytes_by_type()); }

  Model model_ = test::load_stories_model();
  cpu::ThreadPool pool_{2};
};

TEST_F(LayeredResidencyTest, ABudgetGivesTheLogitsOfFullResidency) {
  Session resident(model_, pool_);
  const auto expected = test::greedy_trace(resident, kPrompt, 12);
  const std::uint64_t budget = weights() / 2;
  Session layered(model_, pool_, weights_budget(budget));
  EXPECT_TRUE(test::bit_identical(test::greedy_trace(layered, kPrompt, 12), expected));
  const SessionReport report = layered.report();
  EXPECT_EQ(report.weights_residency, "layered");
  ASSERT_EQ(report.weight_shares.size(), 1u);
  const WeightShare& share = report.weight_shares[0];
  EXPECT_EQ(share.budget_bytes, budget);
  EXPECT_GT(share.streamed_bytes_per_step, 0u);
  EXPECT_EQ(share.streamed_bytes, share.streamed_bytes_per_step * 13) << "a prefill and 12 decode steps";
  // Between steps at most the resident segments and the next streamed one
  // are mapped (pages at the edges of a segment may hold a neighbour's
  // bytes).
  EXPECT_LE(share.resident_bytes, budget + 64 * page());
}

TEST_F(LayeredResidencyTest, EveryRowsLogitsUnderABudgetAreThoseOfFullResidency) {
  Session resident(model_, pool_);
  auto expected = resident.forward(kPrompt);
  ASSERT_TRUE(expected) << expected.error().message();
  const std::vector<float> all_rows = test::to_vector(expected->logits);
  Session layered(model_, pool_, weights_budget(weights() / 2));
  auto got = layered.forward(kPrompt);
  ASSERT_TRUE(got) << got.error().message();
  EXPECT_EQ(got->rows, static_cast<int>(kPrompt.size()));
  EXPECT_TRUE(test::bit_identical(got->logits, all_rows));
}

TEST_F(LayeredResidencyTest, ABudgetBelowTwoLayersIsAClearError) {
  auto plan = plan_residency(model_, WeightScope::everything(), 1000);
  ASSERT_FALSE(plan);
  EXPECT_NE(plan.error().message().find("--max-resident-bytes 1000 is too small"), std::string::npos)
      << plan.error().message();
  // A session given one anyway refuses every step and changes nothing.
  Session session(model_, pool_, weights_budget(1000));
  auto step = session.prefill(kPrompt);
  ASSERT_FALSE(step);
  EXPECT_NE(step.error().message().find("is too small"), std::string::npos) << step.error().message();
  EXPECT_EQ(session.report().position, 0);
}

TEST_F(LayeredResidencyTest, ABudgetOfEverythingStreamsNothing) {
  auto plan = plan_residency(model_, WeightScope::everything(), weights());
  ASSERT_TRUE(plan) << plan.error().message();
  EXPECT_EQ(plan->resident_bytes, weights());
  for (const WeightSegment& unit : plan->units) EXPECT_FALSE(unit.streamed);
  for (const WeightSegment& part : plan->head) EXPECT_FALSE(part.streamed);
}

TEST_F(LayeredResidencyTest, InProcessRanksUnderABudgetGiveTheLogitsOfResidentOnes) {
  DistributedOptions options;
  options.ranks = 2;
  auto resident = DistributedSession::create(model_, options);
  ASSERT_TRUE(resident) << resident.error().message();
  const auto expected = test::greedy_trace(**resident, kPrompt, 8);
  options.max_resident_bytes = weights() * 2 / 5;  // rank 0's three layers stream
  auto layered = DistributedSession::create(model_, options);
  ASSERT_TRUE(layered) << layered.error().message();
  EXPECT_TRUE(test::bit_identical(test::greedy_trace(**layered, kPrompt, 8), expected));
  auto report = (*layered)->report();
  ASSERT_TRUE(report) << report.error().message();
  ASSERT_EQ(report->weight_shares.size(), 2u);
  for (const WeightShare& share : report->weight_shares) {
    EXPECT_EQ(share.residency, "layered");
    EXPECT_LT(share.bytes, weights()) << "each rank holds its share";
  }
  options.max_resident_bytes = 1000;
  auto refused = DistributedSession::create(model_, options);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("rank 0: --max-resident-bytes 1000 is too small"), std::string::npos)
      << refused.error().message();
}

}  // namespace
}  // namespace accord
