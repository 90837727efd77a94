// The paged key/value cache (runtime/model/kv_cache.hpp) and the pool its
// blocks come from: a session holds room for the positions it used, a
// spent pool aborts a step with nothing changed, and an F16 or Q8_0 cache
// gives the same bits on every rank count and path.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "actors/distributed_session.hpp"
#include "kernels/cpu/isa.hpp"
#include "runtime/model/kv_pool.hpp"
#include "runtime/model/stage_backend.hpp"
#include "runtime/session/session.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

StageOptions kv_options(KvType type, std::shared_ptr<KvPool> pool = nullptr) {
  StageOptions options;
  options.kv_type = type;
  options.kv_pool = std::move(pool);
  return options;
}

const std::vector<int> kPrompt = {1, 403, 407, 261, 378};

class KvPoolTest : public ::testing::Test {
 protected:
  const Model model_ = test::load_stories_model();
  cpu::ThreadPool pool_{2};
  // What a block of every unit's keys and values takes in F32.
  std::uint64_t block_bytes() const {
    return KvCache::kBlockPositions * kv_position_bytes(model_.config(), KvType::f32);
  }
};

TEST_F(KvPoolTest, ASessionHoldsRoomForThePositionsItUsed) {
  auto kv_pool = std::make_shared<KvPool>();
  Session session(model_, pool_, kv_options(KvType::f32, kv_pool));
  EXPECT_EQ(session.materialization_report().kv_allocated_bytes, 0u);
  ASSERT_TRUE(session.prefill(kPrompt));
  EXPECT_EQ(kv_pool->used_bytes(), block_bytes());
  for (int i = static_cast<int>(kPrompt.size()); i <= KvCache::kBlockPositions; ++i) ASSERT_TRUE(session.decode(1));
  EXPECT_EQ(session.materialization_report().kv_allocated_bytes, 2 * block_bytes());
  EXPECT_LT(kv_pool->used_bytes(), session.report().kv_bytes_capacity);
  ASSERT_TRUE(session.reset());
  EXPECT_EQ(kv_pool->used_bytes(), 0u) << "a reset gives every block back";
}

TEST_F(KvPoolTest, ASpentPoolAbortsTheStepAndChangesNothing) {
  auto kv_pool = std::make_shared<KvPool>(block_bytes());
  Session first(model_, pool_, kv_options(KvType::f32, kv_pool));
  Session second(model_, pool_, kv_options(KvType::f32, kv_pool));
  ASSERT_TRUE(first.prefill(kPrompt));
  const std::string digest = second.report().state_digest;
  auto refused = second.prefill(kPrompt);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("KV pool's budget"), std::string::npos) << refused.error().message();
  EXPECT_EQ(second.report().state_digest, digest);
  EXPECT_EQ(second.position(), 0);
  EXPECT_EQ(kv_pool->used_bytes(), block_bytes()) << "the refused step holds no block";
  // The first session cannot grow past its block either; once it is reset
  // the second one runs, and gives what a session alone gives.
  std::vector<int> fill(KvCache::kBlockPositions - kPrompt.size(), 1);
  ASSERT_TRUE(first.prefill(fill));
  auto past = first.decode(1);
  ASSERT_FALSE(past);
  EXPECT_EQ(first.position(), KvCache::kBlockPositions);
  ASSERT_TRUE(first.reset());
  Session alone(model_, pool_);
  EXPECT_TRUE(test::bit_identical(test::greedy_trace(second, kPrompt, 8), test::greedy_trace(alone, kPrompt, 8)));
}

// A step that took a block and then aborted gives it back: memory is as
// the step found it, the pool's count included.
TEST_F(KvPoolTest, AnAbortedStepGivesBackTheBlocksItTook) {
  auto kv_pool = std::make_shared<KvPool>();
  Session session(model_, pool_, kv_options(KvType::f32, kv_pool));
  ASSERT_TRUE(session.prefill(kPrompt));
  const std::string digest = session.report().state_digest;
  session.set_failure_hook(test::fail_once(Phase::OutputObservation, session.report().last_epoch + 1));
  const std::vector<int> into_the_next_block(KvCache::kBlockPositions, 1);
  EXPECT_FALSE(session.prefill(into_the_next_block));
  EXPECT_EQ(kv_pool->used_bytes(), block_bytes());
  EXPECT_EQ(session.report().state_digest, digest);
  EXPECT_TRUE(session.prefill(into_the_next_block)) << "the same step runs once the fault is spent";
  EXPECT_EQ(kv_pool->used_bytes(), 2 * block_bytes());
}

// A cache of `type` changes what it keeps (F16 rounds, Q8_0 quantizes), so
// its logits differ from F32's, but they are its own on every path and with
// the model split over ranks; its blocks take `position_bytes` a position.
void expect_own_bits_on_every_path_and_rank_count(const Model& model, cpu::ThreadPool& pool, KvType type,
                                                  std::uint64_t position_bytes) {
  SCOPED_TRACE(std::string(to_string(type)));
  Session f32(model, pool);
  const std::vector<float> f32_trace = test::greedy_trace(f32, kPrompt, 12);
  std::vector<float> trace;
  {
    test::CpuPathScope scope(cpu::Isa::portable);
    ASSERT_TRUE(scope.ok());
    Session session(model, pool, kv_options(type));
    trace = test::greedy_trace(session, kPrompt, 12);
    EXPECT_EQ(session.materialization_report().kv_allocated_bytes, KvCache::kBlockPositions * position_bytes);
    EXPECT_EQ(session.report().kv_bytes_capacity, model.config().seq_len * position_bytes);
  }
  EXPECT_FALSE(test::bit_identical(trace, f32_trace));
  for (cpu::Isa isa : {cpu::Isa::avx2, cpu::Isa::avx512}) {
    test::CpuPathScope scope(isa);
    if (!scope.ok()) continue;
    Session session(model, pool, kv_options(type));
    EXPECT_TRUE(test::bit_identical(test::greedy_trace(session, kPrompt, 12), trace)) << to_string(isa);
  }
  DistributedOptions options;
  options.ranks = 3;
  options.kv_type = type;
  auto ranks = DistributedSession::create(model, options);
  ASSERT_TRUE(ranks) << ranks.error().message();
  EXPECT_TRUE(test::bit_identical(test::greedy_trace(**ranks, kPrompt, 12), trace));
}

// Keys and values of every layer at one position: F16 takes 2 bytes a value.
TEST_F(KvPoolTest, AnF16CacheGivesItsOwnBitsOnEveryPathAndRankCount) {
  const ModelConfig& c = model_.config();
  expect_own_bits_on_every_path_and_rank_count(model_, pool_, KvType::f16, 2 * c.n_layers * c.kv_dim() * 2u);
}

// Q8_0 takes 34 bytes a group of 32 values (stories260K's kv_dim is 32, and
// its heads of 8 values share a group).
TEST_F(KvPoolTest, AQ8_0CacheGivesItsOwnBitsOnEveryPathAndRankCount) {
  const ModelConfig& c = model_.config();
  ASSERT_EQ(c.kv_dim() % 32, 0);
  expect_own_bits_on_every_path_and_rank_count(model_, pool_, KvType::q8_0, 2 * c.n_layers * (c.kv_dim() / 32) * 34u);
}

// A Q8_0 cache stores each group of 32 values of a row as ggml's
// block_q8_0 (the test's own reference), rows that cross a block
// included, reads back d * q, keeps its bytes when what it read is
// written back, and counts its bytes exactly.
TEST(KvCacheQ8_0, StoresEachGroupAsGgmlsBlockAndReadsItBack) {
  ModelConfig c;
  c.dim = 128;
  c.n_heads = 4;
  c.n_kv_heads = 2;  // kv_dim 64: two groups a row
  c.n_layers = 2;
  c.seq_len = 64;
  const auto row_bytes = static_cast<std::size_t>(c.kv_dim()) / 32 * 34;
  KvCache cache(c, 0, c.n_layers, cpu::KvElement::q8_0);
  EXPECT_EQ(cache.position_bytes(), 2 * c.n_layers * row_bytes);
  ASSERT_TRUE(cache.reserve(40));
  EXPECT_EQ(cache.held_bytes(), 2 * KvCache::kBlockPositions * cache.position_bytes());
  const int first = 29, count = 5;  // rows 29..33: across the first block's end
  auto keys = test::random_floats(static_cast<std::size_t>(count) * c.kv_dim(), 21);
  const auto values = test::random_floats(keys.size(), 22);
  std::fill_n(keys.begin(), 32, 0.0f);  // a group of zeros: d = 0
  cache.write_rows(1, first, count, keys.data(), values.data());

  // What the cache holds for those rows of unit 1: each row's keys, then
  // its values.
  const cpu::KvView view = cache.view(1);
  const auto stored = [&] {
    std::vector<std::byte> bytes;
    for (int p = first; p < first + count; ++p) {
      const std::byte* row = view.blocks[p / KvCache::kBlockPositions] + (p % KvCache::kBlockPositions) * row_bytes;
      bytes.insert(bytes.end(), row + view.key_offset, row + view.key_offset + row_bytes);
      bytes.insert(bytes.end(), row + view.value_offset, row + view.value_offset + row_bytes);
    }
    return bytes;
  };
  std::vector<std::byte> expected;
  for (int r = 0; r < count; ++r) {
    for (std::span<const float> rows : {std::span<const float>(keys), std::span<const float>(values)}) {
      const auto blocks = test::q8_0_reference(rows.subspan(r * c.kv_dim(), c.kv_dim()));
      expected.insert(expected.end(), blocks.begin(), blocks.end());
    }
  }
  EXPECT_EQ(stored(), expected);
  std::vector<float> read = test::q8_0_reference_values(keys);
  const std::vector<float> read_values = test::q8_0_reference_values(values);
  read.insert(read.end(), read_values.begin(), read_values.end());
  const std::vector<float> rows = test::kv_rows(cache, 1, first, count);
  EXPECT_TRUE(test::bit_identical(rows, read));
  // An undone step writes back the rows it read (SessionState::restore_rows_after).
  cache.write_rows(1, first, count, rows.data(), rows.data() + rows.size() / 2);
  EXPECT_EQ(stored(), expected) << "rows written back as they were read keep their bytes";
}

// A model whose kv_dim is not whole groups of 32 is refused a Q8_0 cache
// by name, before a step and by a session's step alike, never a crash.
TEST(KvCacheQ8_0, AKvDimOutsideGroupsOf32IsRefused) {
  test::TempDir dir;
  const Model model = test::synthetic_model(dir, {test::small_config(), 3, llama2c::Layout::legacy});
  ASSERT_NE(model.config().kv_dim() % 32, 0);
  const std::string kv_dim = "kv_dim " + std::to_string(model.config().kv_dim());
  const Status refused = check_kv_type(model.config(), KvType::q8_0);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find(kv_dim), std::string::npos) << refused.error().message();
  EXPECT_NE(refused.error().message().find("q8_0"), std::string::npos) << refused.error().message();
  EXPECT_TRUE(check_kv_type(model.config(), KvType::f16));
  cpu::ThreadPool pool(1);
  Session session(model, pool, kv_options(KvType::q8_0));
  auto step = session.prefill(std::vector<int>{1, 2, 3});
  ASSERT_FALSE(step);
  EXPECT_NE(step.error().message().find(kv_dim), std::string::npos) << step.error().message();
}

// accord generate takes --kv-type q8_0, and refuses it for a kv_dim
// outside groups of 32 by name before reading the weights (no tokenizer
// is there to find).
TEST(KvCacheQ8_0, GenerateTakesItAndRefusesAKvDimOutsideGroupsOf32) {
  const auto ran =
      test::run_accord({"generate", "--model", test::stories_model(), "--tokenizer", test::stories_tokenizer(),
                        "--prompt", "Once", "--max-tokens", "4", "--temperature", "0", "--kv-type", "q8_0"});
  EXPECT_EQ(ran.exit_code, 0) << ran.output;
  test::TempDir dir;
  const std::string model = dir.file("m.bin");
  ASSERT_TRUE(write_synthetic_model(model, {test::small_config(), 3, llama2c::Layout::legacy}));
  const auto refused = test::run_accord({"generate", "--model", model, "--prompt", "a", "--kv-type", "q8_0"});
  EXPECT_NE(refused.exit_code, 0);
  const std::string kv_dim = "kv_dim " + std::to_string(test::small_config().kv_dim()) + " is not a multiple of 32";
  EXPECT_NE(refused.output.find(kv_dim), std::string::npos) << refused.output;
}

TEST(KvCacheQ8_0, TheTypeIsNamedQ8_0) {
  ASSERT_TRUE(parse_kv_type("q8_0"));
  EXPECT_EQ(*parse_kv_type("q8_0"), KvType::q8_0);
  EXPECT_EQ(to_string(KvType::q8_0), "q8_0");
  EXPECT_FALSE(parse_kv_type("q8"));
}

}  // namespace
}  // namespace accord
