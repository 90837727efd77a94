// The paged key/value cache (runtime/model/kv_cache.hpp) and the pool its
// blocks come from: a session holds room for the positions it used, a
// spent pool aborts a step with nothing changed, and an F16 cache gives
// the same bits on every rank count and path.
#include <gtest/gtest.h>

#include <memory>
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

// An F16 cache rounds what it keeps, so its logits differ from F32's, but
// they are its own on every path and with the model split over ranks.
TEST_F(KvPoolTest, AnF16CacheGivesItsOwnBitsOnEveryPathAndRankCount) {
  Session f32(model_, pool_);
  const std::vector<float> f32_trace = test::greedy_trace(f32, kPrompt, 12);
  std::vector<float> f16_trace;
  {
    test::CpuPathScope scope(cpu::Isa::portable);
    ASSERT_TRUE(scope.ok());
    Session f16(model_, pool_, kv_options(KvType::f16));
    f16_trace = test::greedy_trace(f16, kPrompt, 12);
    EXPECT_EQ(
        f16.materialization_report().kv_allocated_bytes,
        static_cast<std::uint64_t>(KvCache::kBlockPositions) * f16.report().kv_bytes_capacity / model_.config().seq_len)
        << "an F16 block takes half an F32 one";
  }
  EXPECT_FALSE(test::bit_identical(f16_trace, f32_trace));
  for (cpu::Isa isa : {cpu::Isa::avx2, cpu::Isa::avx512}) {
    test::CpuPathScope scope(isa);
    if (!scope.ok()) continue;
    Session f16(model_, pool_, kv_options(KvType::f16));
    EXPECT_TRUE(test::bit_identical(test::greedy_trace(f16, kPrompt, 12), f16_trace)) << to_string(isa);
  }
  DistributedOptions options;
  options.ranks = 3;
  options.kv_type = KvType::f16;
  auto ranks = DistributedSession::create(model_, options);
  ASSERT_TRUE(ranks) << ranks.error().message();
  EXPECT_TRUE(test::bit_identical(test::greedy_trace(**ranks, kPrompt, 12), f16_trace));
}

}  // namespace
}  // namespace accord
