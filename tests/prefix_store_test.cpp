// The prefix store of `accord serve` (runtime/serve/prefix_store.hpp): the
// longest match over whole blocks and then a part-filled one, least
// recently used eviction by entries and by bytes, which gives the
// snapshots' blocks back to their pool, and a trie pruned to the entries
// it holds. The expected matches are counted here, token by token.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/kv_pool.hpp"
#include "runtime/model/stage_backend.hpp"
#include "runtime/rank/snapshot_shelf.hpp"
#include "runtime/serve/prefix_store.hpp"
#include "runtime/session/session.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

using serve::PrefixStore;
using serve::PrefixStoreLimits;

constexpr int kBlock = KvCache::kBlockPositions;

// BOS, then `count` - 1 tokens of a sequence `seed` picks.
std::vector<int> sequence(int seed, int count) {
  std::vector<int> tokens{1};
  for (int i = 0; static_cast<int>(tokens.size()) < count; ++i) tokens.push_back(260 + (seed * 71 + i * 37) % 211);
  return tokens;
}

std::vector<int> joined(const std::vector<int>& head, int head_count, const std::vector<int>& tail) {
  std::vector<int> tokens(head.begin(), head.begin() + head_count);
  tokens.insert(tokens.end(), tail.begin() + 1, tail.end());  // the tail's BOS dropped
  return tokens;
}

int common_prefix(const std::vector<int>& a, const std::vector<int>& b) {
  int n = 0;
  while (n < static_cast<int>(a.size()) && n < static_cast<int>(b.size()) && a[n] == b[n]) ++n;
  return n;
}

class PrefixStoreTest : public ::testing::Test {
 protected:
  // A snapshot of `tokens`, its session emptied: only the snapshot holds
  // the blocks.
  SessionSnapshot snapshot_of(const std::vector<int>& tokens) {
    EXPECT_TRUE(session_.reset());
    EXPECT_TRUE(session_.prefill(tokens));
    auto snapshot = session_.snapshot();
    EXPECT_TRUE(snapshot) << snapshot.error().message();
    EXPECT_TRUE(session_.reset());
    return std::move(*snapshot);
  }
  std::uint64_t block_bytes() const { return kBlock * kv_position_bytes(model_.config(), KvType::f32); }
  std::uint64_t blocks_in_pool() const { return kv_pool_->used_bytes() / block_bytes(); }

  const Model model_ = test::load_stories_model();
  cpu::ThreadPool pool_{2};
  std::shared_ptr<KvPool> kv_pool_ = std::make_shared<KvPool>();
  Session session_{model_, pool_, StageOptions{BackendChoice{}, 0, KvType::f32, kv_pool_}};
  // a: one whole block and part of the next; b shares 33 of its tokens,
  // d all 40 and a second whole block; c only BOS.
  const std::vector<int> a_ = sequence(0, 40);
  const std::vector<int> b_ = joined(a_, 33, sequence(1, 18));
  const std::vector<int> d_ = joined(a_, 40, sequence(2, 31));
  const std::vector<int> c_ = sequence(3, 40);
};

TEST_F(PrefixStoreTest, TheLongestMatchGoesDownWholeBlocksThenThroughAPartOne) {
  PrefixStore store({}, block_bytes());
  for (const auto* tokens : {&a_, &b_, &d_, &c_}) store.insert(snapshot_of(*tokens));
  ASSERT_EQ(store.counts().entries, 4u);
  struct Case {
    std::vector<int> prompt;
    const std::vector<int>* expected;  // nullptr: no match
  };
  std::vector<int> into_b(b_.begin(), b_.begin() + 45);
  into_b.push_back(7);
  const std::vector<Case> cases{
      {joined(b_, 45, {1, 7, 8}), &b_},                          // past a's 33 shared tokens, b's own
      {joined(d_, 66, {1, 9}), &d_},                             // two whole blocks down
      {joined(a_, 36, {1, 499, 498}), &d_},                      // a and d share 36: the most recently used
      {std::vector<int>(a_.begin(), a_.begin() + 31), nullptr},  // less than a block
      {sequence(9, 40), nullptr},                                // the first block differs
  };
  for (const Case& c : cases) {
    auto match = store.lookup(c.prompt);
    if (c.expected == nullptr) {
      EXPECT_FALSE(match);
      continue;
    }
    ASSERT_TRUE(match);
    EXPECT_EQ(match->snapshot.tokens, *c.expected);
    EXPECT_EQ(match->length, common_prefix(*c.expected, c.prompt));
    EXPECT_GE(match->length, kBlock);
  }
  EXPECT_EQ(store.counts().lookups, cases.size());
  EXPECT_EQ(store.counts().hits, 0u) << "a hit is a restore, which the scheduler counts";
}

TEST_F(PrefixStoreTest, TheLeastRecentlyUsedEntryGoesPastTheEntryBoundAndItsBlocksWithIt) {
  PrefixStore store({2, 0}, block_bytes());
  store.insert(snapshot_of(a_));
  store.insert(snapshot_of(b_));
  EXPECT_EQ(blocks_in_pool(), 4u);
  ASSERT_TRUE(store.lookup(joined(a_, 38, {1, 5})));  // a is now used more recently than b
  const std::size_t shelved = SnapshotShelf::process().size();
  store.insert(snapshot_of(c_));
  EXPECT_EQ(store.counts().entries, 2u);
  EXPECT_EQ(store.counts().evictions, 1u);
  EXPECT_EQ(SnapshotShelf::process().size(), shelved) << "one snapshot in, b's out";
  EXPECT_EQ(blocks_in_pool(), 4u) << "b's two blocks went back to the pool";
  auto match = store.lookup(joined(b_, 45, {1, 7}));
  ASSERT_TRUE(match);
  EXPECT_EQ(match->snapshot.tokens, a_) << "b is gone; a shares its first 33 tokens";
  EXPECT_EQ(match->length, 33);
}

TEST_F(PrefixStoreTest, EntriesPastTheByteBoundGoLeastRecentlyUsedFirst) {
  PrefixStore store({10, 3 * block_bytes()}, block_bytes());
  store.insert(snapshot_of(a_));
  EXPECT_EQ(store.counts().bytes, 2 * block_bytes());
  store.insert(snapshot_of(c_));
  EXPECT_EQ(store.counts().entries, 1u);
  EXPECT_EQ(store.counts().bytes, 2 * block_bytes());
  EXPECT_EQ(blocks_in_pool(), 2u);
  EXPECT_FALSE(store.lookup(a_));
  EXPECT_TRUE(store.lookup(c_));
  store.insert(snapshot_of(sequence(4, 3 * kBlock + 5)));  // four blocks: past the bound alone
  EXPECT_EQ(store.counts().entries, 1u);
  EXPECT_EQ(blocks_in_pool(), 2u);
}

TEST_F(PrefixStoreTest, NodesNobodyPassesThroughArePruned) {
  PrefixStore store({}, block_bytes());
  for (const auto* tokens : {&a_, &d_, &c_}) store.insert(snapshot_of(*tokens));
  EXPECT_EQ(store.nodes(), 3u) << "a's and d's first block, d's second, c's first";
  ASSERT_TRUE(store.evict_oldest());  // a: d still passes through its block
  EXPECT_EQ(store.nodes(), 3u);
  ASSERT_TRUE(store.evict_oldest());  // d
  EXPECT_EQ(store.nodes(), 1u);
  EXPECT_FALSE(store.lookup(d_));
  ASSERT_TRUE(store.evict_oldest());
  EXPECT_EQ(store.nodes(), 0u);
  EXPECT_FALSE(store.evict_oldest());
  EXPECT_EQ(kv_pool_->used_bytes(), 0u);
  EXPECT_EQ(store.counts().evictions, 3u);
}

TEST_F(PrefixStoreTest, ThePromptsOfABlockOrMoreAreKeptOnce) {
  PrefixStore store({}, block_bytes());
  store.insert(snapshot_of(sequence(5, kBlock - 1)));
  EXPECT_EQ(store.counts().entries, 0u);
  store.insert(snapshot_of(a_));
  store.insert(snapshot_of(a_));
  EXPECT_EQ(store.counts().entries, 1u);
  EXPECT_EQ(blocks_in_pool(), 2u) << "the second snapshot of the same tokens was let go";
  PrefixStore none({0, 0}, block_bytes());
  EXPECT_FALSE(none.enabled());
  none.insert(snapshot_of(a_));
  EXPECT_EQ(none.counts().entries, 0u);
}

}  // namespace
}  // namespace accord
