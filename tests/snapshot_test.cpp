// Snapshots and forks of a session (runtime/rank/snapshot_shelf.hpp,
// Session::snapshot/restore/fork): a snapshot shares the cache's blocks,
// stays as it was while every session descended from it advances, costs
// what estimate_snapshot() says, and a failed snapshot, restore or fork
// changes nothing. Steps on a shared or forked prefix give the bits the
// same session computes alone.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "actors/distributed_session.hpp"
#include "messages/session_api.hpp"
#include "runtime/agreement/transaction_plan.hpp"
#include "runtime/model/kv_pool.hpp"
#include "runtime/model/stage_backend.hpp"
#include "runtime/rank/snapshot_shelf.hpp"
#include "runtime/session/session.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

StageOptions pooled(std::shared_ptr<KvPool> pool, KvType type = KvType::f32) {
  StageOptions options;
  options.kv_type = type;
  options.kv_pool = std::move(pool);
  return options;
}

// 40 tokens: one whole block and part of the next.
std::vector<int> prompt() {
  std::vector<int> tokens = {1, 403, 407, 261, 378};
  for (int i = 0; tokens.size() < 40; ++i) tokens.push_back(260 + (i * 37) % 200);
  return tokens;
}

// The logits of each of `tokens` decoded one by one.
std::vector<float> decode_all(Session& session, const std::vector<int>& tokens) {
  std::vector<float> logits;
  for (int token : tokens) {
    auto step = session.decode(token);
    EXPECT_TRUE(step) << step.error().message();
    if (!step) break;
    logits.insert(logits.end(), step->logits.begin(), step->logits.end());
  }
  return logits;
}

class SnapshotTest : public ::testing::Test {
 protected:
  std::uint64_t block_bytes() const {
    return KvCache::kBlockPositions * kv_position_bytes(model_.config(), KvType::f32);
  }

  const Model model_ = test::load_stories_model();
  cpu::ThreadPool pool_{2};
  std::shared_ptr<KvPool> kv_pool_ = std::make_shared<KvPool>();
  Session session_{model_, pool_, pooled(kv_pool_)};
};

TEST_F(SnapshotTest, ASnapshotStaysAsItWasWhileItsSessionsAdvance) {
  ASSERT_TRUE(session_.prefill(prompt()));
  auto snapshot = session_.snapshot();
  ASSERT_TRUE(snapshot) << snapshot.error().message();
  EXPECT_EQ(snapshot->position(), 40);
  EXPECT_EQ(snapshot->digest, session_.content_digest());

  ASSERT_FALSE(decode_all(session_, {300, 301, 302}).empty());
  auto fork = session_.fork(*snapshot);
  ASSERT_TRUE(fork) << fork.error().message();
  EXPECT_EQ(fork->content_digest(), snapshot->digest);
  const std::vector<float> forked = decode_all(*fork, {310, 311, 312, 313});

  // Both descendants moved on; the snapshot did not.
  ASSERT_TRUE(session_.restore(*snapshot));
  EXPECT_EQ(session_.content_digest(), snapshot->digest);
  EXPECT_EQ(session_.position(), 40);
  EXPECT_TRUE(std::equal(session_.tokens().begin(), session_.tokens().end(), prompt().begin()));

  // The same tokens on the restored session, on the fork, and on a session
  // that computed the prefix alone give the same bits.
  Session alone(model_, pool_);
  ASSERT_TRUE(alone.prefill(prompt()));
  const std::vector<float> expected = decode_all(alone, {310, 311, 312, 313});
  EXPECT_TRUE(test::bit_identical(forked, expected));
  EXPECT_TRUE(test::bit_identical(decode_all(session_, {310, 311, 312, 313}), expected));
}

TEST_F(SnapshotTest, ASnapshotSharesBlocksAndCostsWhatTheEstimateSays) {
  ASSERT_TRUE(session_.prefill(prompt()));
  const std::uint64_t held = kv_pool_->used_bytes();
  ASSERT_EQ(held, 2 * block_bytes());
  const SnapshotEstimate estimate = session_.estimate_snapshot();
  EXPECT_EQ(kv_pool_->used_bytes(), held) << "an estimate changes nothing";
  EXPECT_EQ(estimate.copied_bytes, 0u);
  EXPECT_EQ(estimate.shared_bytes, held);
  EXPECT_EQ(estimate.copy_on_write_bytes, block_bytes()) << "the part-filled second block";

  auto snapshot = session_.snapshot();
  ASSERT_TRUE(snapshot);
  EXPECT_EQ(kv_pool_->used_bytes(), held) << "a snapshot copies nothing";
  ASSERT_FALSE(decode_all(session_, {300}).empty());
  EXPECT_EQ(kv_pool_->used_bytes(), held + estimate.copy_on_write_bytes) << "the shared block is copied once";
  ASSERT_FALSE(decode_all(session_, {301, 302}).empty());
  EXPECT_EQ(kv_pool_->used_bytes(), held + estimate.copy_on_write_bytes) << "and written in place after";

  auto fork = session_.fork(*snapshot);
  ASSERT_TRUE(fork);
  EXPECT_EQ(kv_pool_->used_bytes(), held + block_bytes()) << "a fork shares the snapshot's blocks";

  // The last holder of a block gives it back.
  const std::size_t shelved = SnapshotShelf::process().size();
  snapshot = Error(ErrorCode::state, "dropped");
  EXPECT_EQ(SnapshotShelf::process().size(), shelved - 1);
  ASSERT_TRUE(fork->reset());
  EXPECT_EQ(kv_pool_->used_bytes(), 2 * block_bytes()) << "only the session's own blocks are left";
  ASSERT_TRUE(session_.reset());
  EXPECT_EQ(kv_pool_->used_bytes(), 0u);
}

TEST_F(SnapshotTest, CheckpointsTakenBeforeARestoreAreRefused) {
  ASSERT_TRUE(session_.prefill(prompt()));
  auto snapshot = session_.snapshot();
  ASSERT_TRUE(snapshot);
  ASSERT_FALSE(decode_all(session_, {300}).empty());
  auto checkpoint = session_.checkpoint();
  ASSERT_TRUE(checkpoint);
  ASSERT_TRUE(session_.restore(*snapshot));
  const std::string digest = session_.state_digest();
  auto refused = session_.rollback(*checkpoint);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("overwritten"), std::string::npos) << refused.error().message();
  EXPECT_EQ(session_.state_digest(), digest);
}

// A fault in any phase of a snapshot or a restore aborts it: the state, the
// pool and the shelf are as they were.
TEST_F(SnapshotTest, AFailedSnapshotOrRestoreChangesNothing) {
  ASSERT_TRUE(session_.prefill(prompt()));
  auto snapshot = session_.snapshot();
  ASSERT_TRUE(snapshot);
  ASSERT_FALSE(decode_all(session_, {300, 301}).empty());
  for (const TransactionRequest& request :
       {TransactionRequest{SnapshotRequest{1}}, TransactionRequest{SnapshotRestoreRequest{1}}}) {
    for (const PhaseId& phase : phases_of(request, 1)) {
      SCOPED_TRACE(to_string(phase));
      const std::string digest = session_.state_digest();
      const std::uint64_t held = kv_pool_->used_bytes();
      const std::size_t shelved = SnapshotShelf::process().size();
      session_.set_failure_hook(test::fail_once(phase.phase, session_.report().last_epoch + 1));
      const bool failed =
          request.kind() == TransactionKind::snapshot ? !session_.snapshot() : !session_.restore(*snapshot);
      session_.set_failure_hook({});
      EXPECT_TRUE(failed);
      EXPECT_EQ(session_.state_digest(), digest);
      EXPECT_EQ(kv_pool_->used_bytes(), held);
      EXPECT_EQ(SnapshotShelf::process().size(), shelved);
    }
  }
  // A fork that fails is a session that never came to be: it holds nothing.
  SessionSnapshot unknown = *snapshot;
  unknown.id = 0;  // SnapshotShelf::new_id() never gives it
  const std::uint64_t held = kv_pool_->used_bytes();
  EXPECT_FALSE(session_.fork(unknown));
  EXPECT_EQ(kv_pool_->used_bytes(), held);
}

TEST_F(SnapshotTest, AReleasedOrForeignSnapshotIsRefusedWithNothingChanged) {
  ASSERT_TRUE(session_.prefill(prompt()));
  auto snapshot = session_.snapshot();
  ASSERT_TRUE(snapshot);
  SessionSnapshot released = *snapshot;
  released.hold.reset();
  snapshot = Error(ErrorCode::state, "dropped");
  ASSERT_TRUE(session_.reset());
  auto refused = session_.restore(released);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("holds no snapshot"), std::string::npos) << refused.error().message();
  EXPECT_EQ(session_.position(), 0);

  // An F16 session cannot take an F32 one's rows.
  ASSERT_TRUE(session_.prefill(prompt()));
  auto f32 = session_.snapshot();
  ASSERT_TRUE(f32);
  Session f16(model_, pool_, pooled(kv_pool_, KvType::f16));
  ASSERT_TRUE(f16.prefill(std::vector<int>{1, 2, 3}));
  const std::string digest = f16.state_digest();
  auto other_type = f16.restore(*f32);
  ASSERT_FALSE(other_type);
  EXPECT_NE(other_type.error().message().find("another type"), std::string::npos) << other_type.error().message();
  EXPECT_EQ(f16.state_digest(), digest);
}

// Copying a shared block takes a block from the pool: a spent pool aborts
// the step that needed it, as it aborts one that needed room.
TEST_F(SnapshotTest, ACopyOnWriteThatWouldPassTheBudgetAbortsTheStep) {
  auto tight = std::make_shared<KvPool>(2 * block_bytes());
  Session session(model_, pool_, pooled(tight));
  ASSERT_TRUE(session.prefill(prompt()));
  auto snapshot = session.snapshot();
  ASSERT_TRUE(snapshot);
  const std::string digest = session.state_digest();
  auto refused = session.decode(300);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("KV pool's budget"), std::string::npos) << refused.error().message();
  EXPECT_EQ(session.state_digest(), digest);
  EXPECT_EQ(tight->used_bytes(), 2 * block_bytes());
  snapshot = Error(ErrorCode::state, "released");
  EXPECT_TRUE(session.decode(300)) << "once the snapshot is released the block is the session's alone";
}

// Three in-process ranks: the estimate is a single rank's (the ranks'
// blocks together hold what one rank's do), and the fork and the restored
// session give a single rank's bits.
TEST_F(SnapshotTest, ThreeRanksSnapshotForkAndRestoreAsOneRankDoes) {
  DistributedOptions options;
  options.ranks = 3;
  auto ranks = DistributedSession::create(model_, options);
  ASSERT_TRUE(ranks) << ranks.error().message();
  ASSERT_TRUE((*ranks)->prefill(prompt()));
  ASSERT_TRUE(session_.prefill(prompt()));
  auto estimate = (*ranks)->estimate_snapshot();
  ASSERT_TRUE(estimate) << estimate.error().message();
  const SnapshotEstimate one = session_.estimate_snapshot();
  EXPECT_EQ(estimate->shared_bytes, one.shared_bytes);
  EXPECT_EQ(estimate->copy_on_write_bytes, one.copy_on_write_bytes);

  auto snapshot = (*ranks)->snapshot();
  ASSERT_TRUE(snapshot) << snapshot.error().message();
  EXPECT_EQ(snapshot->position(), 40);
  ASSERT_TRUE((*ranks)->decode(300));
  auto fork = (*ranks)->fork(*snapshot);
  ASSERT_TRUE(fork) << fork.error().message();
  EXPECT_EQ((*fork)->position(), 40);
  const std::vector<float> expected = decode_all(session_, {310, 311});
  ASSERT_TRUE((*ranks)->restore(*snapshot));
  for (DistributedSession* session : {fork->get(), ranks->get()}) {
    std::vector<float> logits;
    for (int token : {310, 311}) {
      auto step = session->decode(token);
      ASSERT_TRUE(step) << step.error().message();
      logits.insert(logits.end(), step->logits.begin(), step->logits.end());
    }
    EXPECT_TRUE(test::bit_identical(logits, expected));
  }
  SessionSnapshot unknown = *snapshot;
  unknown.id = 0;
  EXPECT_FALSE((*ranks)->fork(unknown));
}

}  // namespace
}  // namespace accord
