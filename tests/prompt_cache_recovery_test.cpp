// A save that did not publish on every rank heals the next time the cache
// is opened (runtime/rank/prompt_cache_recovery.hpp): rolled forward
// when every rank holds the new generation whole, back when one lost it,
// emptied when no generation is whole everywhere. Each mixed state is laid
// on disk exactly as a killed save leaves it, from real saves: the new
// generation staged on every rank, then published on some.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "actors/distributed_session.hpp"
#include "runtime/io/durable_file.hpp"
#include "runtime/rank/prompt_cache.hpp"
#include "runtime/rank/prompt_cache_recovery.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

namespace fs = std::filesystem;

constexpr int kRanks = 3;
constexpr int kOldPrefix = 5;  // the live cache before the interrupted save
constexpr int kNewPrefix = 7;  // what the interrupted save wrote

class PromptCacheRecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = Model::load(test::stories_model());
    ASSERT_TRUE(model) << model.error().message();
    model_ = std::make_unique<Model>(std::move(*model));
  }

  std::unique_ptr<DistributedSession> new_session() {
    DistributedOptions options;
    options.ranks = kRanks;
    auto session = DistributedSession::create(*model_, options);
    EXPECT_TRUE(session) << session.error().message();
    return session ? std::move(*session) : nullptr;
  }

  // A whole save of the first n prompt tokens; returns its generation.
  std::string save(const fs::path& root, int n) {
    auto session = new_session();
    EXPECT_TRUE(session->prefill(test::cache_prefix(n)));
    auto saved = session->save_prompt_cache(root, test::kCacheDescriptor, test::cache_prefix(n));
    EXPECT_TRUE(saved) << saved.error().message();
    return saved ? saved->generation : "";
  }

  // The old cache live on every rank, and a newer save prepared (staged)
  // on the ranks in `staged` and published, as PromptCacheSavePublication
  // does it, on those in `published`. Returns the new generation's name.
  std::string interrupted_save(const std::set<int>& staged, const std::set<int>& published) {
    old_ = save(root(), kOldPrefix);
    const fs::path other = dir_.path() / "other";
    const std::string name = save(other, kNewPrefix);
    for (int r : staged) {
      fs::rename(generation_folder(rank_folder(other, r), name), staging_folder(rank_folder(root(), r), name));
    }
    for (int r : published) {
      const fs::path dir = rank_folder(root(), r);
      fs::rename(staging_folder(dir, name), generation_folder(dir, name));
      set_current(r, name);
    }
    return name;
  }

  void set_current(int rank, const std::string& name) {
    std::ofstream(rank_folder(root(), rank) / "CURRENT") << name << "\n";
  }

  std::string current(int rank) const {
    std::ifstream in(rank_folder(root(), rank) / "CURRENT");
    std::string name;
    std::getline(in, name);
    return name;
  }

  Status load(int n) {
    auto session = new_session();
    return session->load_prompt_cache(root(), test::kCacheDescriptor, test::cache_prefix(n));
  }

  // Recovery made `name` live on every rank, and it loads.
  void expect_live(const std::string& name, int n) {
    for (int r = 0; r < kRanks; ++r) EXPECT_EQ(current(r), name) << "rank " << r;
    Status loaded = load(n);
    EXPECT_TRUE(loaded) << loaded.error().message();
  }

  PromptCacheRecovery recover() {
    auto recovered = recover_prompt_cache(root());
    EXPECT_TRUE(recovered) << recovered.error().message();
    return recovered ? *recovered : PromptCacheRecovery{};
  }

  fs::path root() const { return dir_.path() / "cache"; }

  std::unique_ptr<Model> model_;
  test::TempDir dir_;
  std::string old_;
};

TEST_F(PromptCacheRecoveryTest, AConsistentCacheIsLeftAlone) {
  const std::string name = save(root(), kOldPrefix);
  const auto before = fs::last_write_time(rank_folder(root(), 1) / "CURRENT");
  EXPECT_EQ(recover().action, RecoveryAction::none);
  EXPECT_EQ(fs::last_write_time(rank_folder(root(), 1) / "CURRENT"), before);
  expect_live(name, kOldPrefix);
  EXPECT_EQ(recover_prompt_cache(dir_.path() / "nothing-here")->action, RecoveryAction::none);
}

TEST_F(PromptCacheRecoveryTest, RollsForwardWhenOneRankDiedBeforeItsRename) {
  // --ranks 3 --fault 1:PromptCacheSavePublication:exit: ranks 0 and 2
  // published, rank 1 kept only its staging folder.
  const std::string name = interrupted_save({0, 1, 2}, {0, 2});
  EXPECT_NE(load(kNewPrefix).ok(), true) << "the mixed state is refused before recovery";
  const auto recovered = recover();
  EXPECT_EQ(recovered.action, RecoveryAction::healed) << recovered.reason;
  EXPECT_EQ(recovered.live, name);
  EXPECT_NE(recovered.reason.find("rank-01 on " + old_), std::string::npos) << recovered.reason;
  expect_live(name, kNewPrefix);
  EXPECT_FALSE(fs::exists(staging_folder(rank_folder(root(), 1), name)));
}

TEST_F(PromptCacheRecoveryTest, RollsForwardWhenTheLastRankKeptTheOldCache) {
  // 2:PromptCacheSavePublication:exit over a cache of another prompt.
  const std::string name = interrupted_save({0, 1, 2}, {0, 1});
  EXPECT_EQ(current(2), old_);
  EXPECT_EQ(recover().action, RecoveryAction::healed);
  expect_live(name, kNewPrefix);
}

TEST_F(PromptCacheRecoveryTest, RollsForwardAfterAKillBetweenTheRanksRenamesOfCurrent) {
  // Every rank renamed its generation into place; rank 2 was killed while
  // writing its new CURRENT, leaving CURRENT.partial beside the old one.
  const std::string name = interrupted_save({0, 1, 2}, {0, 1, 2});
  set_current(2, old_);
  std::ofstream(rank_folder(root(), 2) / "CURRENT.partial") << name.substr(0, 3);
  EXPECT_EQ(recover().action, RecoveryAction::healed);
  expect_live(name, kNewPrefix);
  EXPECT_FALSE(fs::exists(rank_folder(root(), 2) / "CURRENT.partial"));
}

TEST_F(PromptCacheRecoveryTest, RollsBackWhenARankLostTheNewGeneration) {
  // Rank 2's staging folder is gone (its disk lost it): the new save
  // cannot be finished, and the old one is still whole everywhere.
  interrupted_save({0, 1}, {0, 1});
  const auto recovered = recover();
  EXPECT_EQ(recovered.action, RecoveryAction::healed) << recovered.reason;
  EXPECT_EQ(recovered.live, old_);
  expect_live(old_, kOldPrefix);
}

TEST_F(PromptCacheRecoveryTest, DoesNotRollForwardOntoACorruptedStagedShard) {
  const std::string name = interrupted_save({0, 1, 2}, {0, 2});
  const fs::path shard = staging_folder(rank_folder(root(), 1), name) / "kv.bin";
  auto bytes = test::read_bytes(shard.string());
  bytes[bytes.size() / 2] ^= std::byte{0x01};
  test::write_bytes(shard.string(), bytes);
  EXPECT_EQ(recover().live, old_);
  expect_live(old_, kOldPrefix);
}

TEST_F(PromptCacheRecoveryTest, AMissingRankFolderEmptiesTheCacheSoTheNextSaveStartsAfresh) {
  for (int missing : {0, 1}) {
    SCOPED_TRACE("missing rank " + std::to_string(missing));
    fs::remove_all(root());
    save(root(), kOldPrefix);
    fs::remove_all(rank_folder(root(), missing));
    const auto recovered = recover();
    EXPECT_EQ(recovered.action, RecoveryAction::cleared) << recovered.reason;
    for (int r = 0; r < kRanks; ++r) EXPECT_FALSE(fs::exists(rank_folder(root(), r) / "CURRENT")) << "rank " << r;
    const std::string name = save(root(), kNewPrefix);
    expect_live(name, kNewPrefix);
  }
}

TEST_F(PromptCacheRecoveryTest, ACurrentNamingADeletedGenerationIsCleared) {
  // What two writers without a lock left: CURRENT names a generation
  // that the other writer's commit removed.
  const std::string name = save(root(), kOldPrefix);
  for (int r = 0; r < kRanks; ++r) fs::remove_all(generation_folder(rank_folder(root(), r), name));
  EXPECT_EQ(recover().action, RecoveryAction::cleared);
  EXPECT_FALSE(fs::exists(rank_folder(root(), 0) / "CURRENT"));
}

TEST_F(PromptCacheRecoveryTest, ADamagedLiveGenerationIsLeftForTheLoadToRefuse) {
  const std::string name = save(root(), kOldPrefix);
  std::ofstream(generation_folder(rank_folder(root(), 0), name) / "manifest.json") << "{ not json";
  EXPECT_EQ(recover().action, RecoveryAction::none);
  EXPECT_EQ(current(0), name);
  EXPECT_FALSE(load(kOldPrefix));
}

TEST_F(PromptCacheRecoveryTest, WaitsForNobodyWhileAWriterHoldsALock) {
  interrupted_save({0, 1, 2}, {0, 2});
  auto lock = FileLock::try_take(rank_folder(root(), 2) / "LOCK");
  ASSERT_TRUE(lock && *lock);
  EXPECT_EQ(recover().action, RecoveryAction::busy);
  EXPECT_EQ(current(1), old_) << "nothing is touched while a writer may be running";
}

}  // namespace
}  // namespace accord
