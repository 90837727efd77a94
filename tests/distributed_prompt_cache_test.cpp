// The prompt cache over several ranks: one shard per rank; a hit equals a
// cold prefill bit for bit on 1, 2 and 3 ranks; a cache of another rank
// count, a corrupted shard or ranks from two saves are refused before any
// rank's state changes; an aborted save leaves the previous cache live on
// every rank; complete checkpoints carry the prepared input.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "actors/distributed_session.hpp"
#include "runtime/rank/prompt_cache.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

namespace fs = std::filesystem;

class DistributedPromptCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = Model::load(test::stories_model());
    ASSERT_TRUE(model) << model.error().message();
    model_ = std::make_unique<Model>(std::move(*model));
  }

  std::unique_ptr<DistributedSession> new_session(int ranks) {
    DistributedOptions options;
    options.ranks = ranks;
    auto session = DistributedSession::create(*model_, options);
    EXPECT_TRUE(session) << session.error().message();
    return session ? std::move(*session) : nullptr;
  }

  // Saves the first n prompt tokens into root from a fresh session of `ranks`.
  void save(const fs::path& root, int ranks, int n) {
    auto session = new_session(ranks);
    ASSERT_TRUE(session->prefill(test::cache_prefix(n)));
    auto saved = session->save_prompt_cache(root, test::kCacheDescriptor, test::cache_prefix(n));
    ASSERT_TRUE(saved) << saved.error().message();
    EXPECT_EQ(saved->prefix_token_count, n);
  }

  static std::vector<std::string> digests(DistributedSession& session) {
    auto checkpoint = session.checkpoint();
    EXPECT_TRUE(checkpoint) << checkpoint.error().message();
    return checkpoint ? checkpoint->rank_digests : std::vector<std::string>{};
  }

  // Expects the load of test::cache_prefix(n) to be refused with `fragment` in the
  // message, every rank's state unchanged and the session usable.
  void expect_refused(DistributedSession& session, const fs::path& root, int n, const std::string& fragment) {
    if (session.position() == 0) {
      ASSERT_TRUE(session.prefill(std::vector<int>{1, 50, 60}));
    }
    const int position = session.position();
    const auto before = digests(session);
    Status loaded = session.load_prompt_cache(root, test::kCacheDescriptor, test::cache_prefix(n));
    ASSERT_FALSE(loaded) << "expected refusal: " << fragment;
    EXPECT_EQ(loaded.error().code(), ErrorCode::prompt_cache) << loaded.error().message();
    EXPECT_NE(loaded.error().message().find(fragment), std::string::npos) << loaded.error().message();
    EXPECT_EQ(session.position(), position);
    EXPECT_EQ(digests(session), before);
    EXPECT_TRUE(session.decode(5)) << "the session must stay usable";
  }

  static std::string current(const fs::path& root, int rank) {
    std::ifstream in(rank_folder(root, rank) / "CURRENT");
    std::string name;
    std::getline(in, name);
    return name;
  }

  static fs::path live_folder(const fs::path& root, int rank) {
    return rank_folder(root, rank) / "generations" / current(root, rank);
  }

  std::unique_ptr<Model> model_;
  test::TempDir dir_;
};

TEST_F(DistributedPromptCacheTest, AHitGivesTheLogitsOfAColdPrefillOnOneToThreeRanks) {
  const int n = 5;
  auto cold = new_session(1);
  const auto expected = cold->prefill(test::kCachePrompt)->logits;
  for (int ranks = 1; ranks <= 3; ++ranks) {
    const fs::path root = dir_.path() / ("cache-" + std::to_string(ranks));
    auto session = new_session(ranks);
    ASSERT_TRUE(session->prefill(test::cache_prefix(n)));
    auto saved = session->save_prompt_cache(root, test::kCacheDescriptor, test::cache_prefix(n));
    ASSERT_TRUE(saved) << saved.error().message();
    EXPECT_EQ(saved->shard_bytes, 5u * n * 32 * 2 * 4) << "five units in all";
    for (int r = 0; r < ranks; ++r) {
      EXPECT_EQ(current(root, r), saved->generation) << "rank " << r;
      std::ifstream in(live_folder(root, r) / "manifest.json");
      const auto manifest = nlohmann::json::parse(in);
      EXPECT_EQ(manifest.at("topology").at("ranks"), ranks);
      EXPECT_EQ(manifest.at("topology").at("rank"), r);
    }
    EXPECT_FALSE(fs::exists(rank_folder(root, ranks)));

    ASSERT_TRUE(session->reset());
    Status loaded = session->load_prompt_cache(root, test::kCacheDescriptor, test::cache_prefix(n));
    ASSERT_TRUE(loaded) << loaded.error().message();
    EXPECT_EQ(session->position(), n);
    auto rest = session->prefill(std::span<const int>(test::kCachePrompt).subspan(n));
    ASSERT_TRUE(rest) << rest.error().message();
    EXPECT_TRUE(test::bit_identical(rest->logits, expected)) << ranks << " ranks";
  }
}

TEST_F(DistributedPromptCacheTest, OneRankCachesAreTheSingleRankSessionsToo) {
  save(dir_.path(), 1, 5);
  cpu::ThreadPool pool(1);
  Session session(*model_, pool);
  Status loaded = session.load_prompt_cache(dir_.path(), test::kCacheDescriptor, test::cache_prefix(5));
  EXPECT_TRUE(loaded) << loaded.error().message();
}

TEST_F(DistributedPromptCacheTest, RefusesACacheSavedWithAnotherRankCount) {
  for (const auto& [saved_with, loaded_with] : std::vector<std::pair<int, int>>{{2, 3}, {3, 2}, {2, 1}}) {
    const fs::path root = dir_.path() / ("cache-" + std::to_string(saved_with) + "-" + std::to_string(loaded_with));
    save(root, saved_with, 5);
    auto session = new_session(loaded_with);
    expect_refused(*session, root, 5,
                   "the cache was saved with " + std::to_string(saved_with) + " rank(s); this session has " +
                       std::to_string(loaded_with) + " rank(s)");
  }
}

TEST_F(DistributedPromptCacheTest, ACorruptedShardOnOneRankAbortsTheLoadOnEveryRank) {
  save(dir_.path(), 3, 5);
  const fs::path shard = live_folder(dir_.path(), 1) / "kv.bin";
  auto bytes = test::read_bytes(shard.string());
  bytes[bytes.size() / 2] ^= std::byte{0x01};
  test::write_bytes(shard.string(), bytes);
  auto session = new_session(3);
  expect_refused(*session, dir_.path(), 5, "corrupted");
  Status loaded = session->load_prompt_cache(dir_.path(), test::kCacheDescriptor, test::cache_prefix(5));
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().phase(), "PromptCacheLoadPreparation");
}

TEST_F(DistributedPromptCacheTest, RanksHoldingTwoDifferentSavesAreRefused) {
  save(dir_.path() / "a", 2, 5);
  save(dir_.path() / "b", 2, 5);
  // Rank 1 of "a" now holds rank 1 of another save of the same prefix.
  fs::remove_all(rank_folder(dir_.path() / "a", 1));
  fs::copy(rank_folder(dir_.path() / "b", 1), rank_folder(dir_.path() / "a", 1), fs::copy_options::recursive);
  auto session = new_session(2);
  expect_refused(*session, dir_.path() / "a", 5, "two different saves");
}

TEST_F(DistributedPromptCacheTest, AnAbortedSaveLeavesThePreviousCacheLiveOnEveryRank) {
  const fs::path root = dir_.path();
  save(root, 2, 5);
  const std::string old_generation = current(root, 0);
  // Rank 1 cannot switch its CURRENT (the temporary file's name is taken by
  // a folder), so its publication fails after rank 0 published.
  const fs::path obstruction = rank_folder(root, 1) / "CURRENT.partial";
  fs::create_directories(obstruction / "taken");
  auto session = new_session(2);
  ASSERT_TRUE(session->prefill(test::cache_prefix(7)));
  auto saved = session->save_prompt_cache(root, test::kCacheDescriptor, test::cache_prefix(7));
  ASSERT_FALSE(saved);
  EXPECT_EQ(saved.error().phase(), "PromptCacheSavePublication") << saved.error().message();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(current(root, r), old_generation) << "rank " << r;
    int generations = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(rank_folder(root, r) / "generations")) ++generations;
    EXPECT_EQ(generations, 1) << "rank " << r << " kept the aborted save's generation";
  }
  auto reader = new_session(2);
  Status loaded = reader->load_prompt_cache(root, test::kCacheDescriptor, test::cache_prefix(5));
  EXPECT_TRUE(loaded) << loaded.error().message();

  fs::remove_all(obstruction);
  auto again = session->save_prompt_cache(root, test::kCacheDescriptor, test::cache_prefix(7));
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_EQ(current(root, 0), again->generation);
  EXPECT_EQ(current(root, 1), again->generation);
}

TEST_F(DistributedPromptCacheTest, SaveRefusesAPrefixTheRanksDoNotHold) {
  auto session = new_session(2);
  ASSERT_TRUE(session->prefill(test::cache_prefix(4)));
  auto saved = session->save_prompt_cache(dir_.path(), test::kCacheDescriptor, test::cache_prefix(5));
  ASSERT_FALSE(saved);
  EXPECT_EQ(saved.error().code(), ErrorCode::contract);
  EXPECT_EQ(saved.error().phase(), "PromptCacheSavePreflight");
  EXPECT_FALSE(fs::exists(rank_folder(dir_.path(), 0) / "CURRENT"));
}

TEST_F(DistributedPromptCacheTest, CompleteCheckpointsCarryThePreparedInput) {
  auto saver = new_session(2);
  ASSERT_TRUE(saver->prefill(test::cache_prefix(5)));
  ASSERT_TRUE(
      saver->save_prompt_cache_for_input(dir_.path(), test::kCacheDescriptor, test::cache_prefix(5), "image:42"));
  EXPECT_FALSE(saver->save_prompt_cache_for_input(dir_.path(), test::kCacheDescriptor, test::cache_prefix(5), ""));

  auto session = new_session(2);
  EXPECT_FALSE(session->committed_prompt_input_identity());
  Status wrong =
      session->load_prompt_cache_for_input(dir_.path(), test::kCacheDescriptor, test::cache_prefix(5), "image:7");
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.error().message().find("another prepared input"), std::string::npos);
  ASSERT_TRUE(
      session->load_prompt_cache_for_input(dir_.path(), test::kCacheDescriptor, test::cache_prefix(5), "image:42"));
  auto identity = session->committed_prompt_input_identity();
  ASSERT_TRUE(identity);
  EXPECT_EQ(identity->prepared_input, "image:42");
  EXPECT_EQ(identity->prepared_token_count, 5);
  EXPECT_EQ(identity->token_count, 5);

  auto after_load = session->checkpoint_complete();
  ASSERT_TRUE(after_load) << after_load.error().message();
  ASSERT_TRUE(session->decode(10));
  EXPECT_EQ(session->committed_prompt_input_identity()->token_count, 6);
  EXPECT_EQ(session->committed_prompt_input_identity()->prepared_input, "image:42");
  ASSERT_TRUE(session->rollback_complete(*after_load));
  EXPECT_EQ(session->committed_prompt_input_identity(), after_load->prompt);
  EXPECT_EQ(digests(*session), after_load->state.rank_digests);

  ASSERT_TRUE(session->reset());
  EXPECT_FALSE(session->committed_prompt_input_identity());
  EXPECT_FALSE(session->rollback_complete(*after_load)) << "no checkpoint survives a reset";
  ASSERT_TRUE(session->prefill(test::cache_prefix(3)));
  auto plain = session->checkpoint_complete();
  ASSERT_TRUE(plain);
  ASSERT_TRUE(plain->prompt);
  EXPECT_EQ(plain->prompt->prepared_input, "");
  auto mismatched = *plain;
  mismatched.prompt->token_count = 2;
  Status refused = session->rollback_complete(mismatched);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), ErrorCode::contract);
}

// A rank that exits while its save holds the writer lock (after it
// published, before the commit) lets go of the lock before reset starts it
// afresh: the restarted rank's next save is never refused as "another
// writer". Repeated, since the old rank's actors end on their own threads
// (the race showed once in the fault matrix on a busy machine; this loop
// rarely meets it on an idle one).
TEST_F(DistributedPromptCacheTest, ARankThatExitedMidSaveLeavesNoLockToItsSuccessor) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    const fs::path root = dir_.path() / std::to_string(attempt);
    auto session = new_session(1);
    ASSERT_TRUE(session->prefill(test::cache_prefix(5)));
    Fault exit_at_commit;
    exit_at_commit.phase = DistributedExecutionPhase::Commit;
    exit_at_commit.kind = FaultKind::exit;
    ASSERT_TRUE(session->inject_faults({exit_at_commit}));
    ASSERT_FALSE(session->save_prompt_cache(root, test::kCacheDescriptor, test::cache_prefix(5)));
    ASSERT_TRUE(session->reset());
    ASSERT_TRUE(session->prefill(test::cache_prefix(5)));
    auto saved = session->save_prompt_cache(root, test::kCacheDescriptor, test::cache_prefix(5));
    EXPECT_TRUE(saved) << "attempt " << attempt << ": " << saved.error().message();
  }
}

}  // namespace
}  // namespace accord
