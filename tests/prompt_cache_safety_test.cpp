// The prompt cache deletes only what it wrote: it never writes through a
// symbolic link below the root, removes only its own generation and
// staging folders and only its own files in them, refuses a second writer
// while the first holds the rank's lock, and refuses manifests whose
// numbers are out of range. Links that cannot be resolved are reported as
// such, never as an exception.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/io/durable_file.hpp"
#include "runtime/rank/prompt_cache.hpp"
#include "runtime/rank/prompt_cache_recovery.hpp"
#include "runtime/session/session.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

namespace fs = std::filesystem;

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class PromptCacheSafetyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = Model::load(test::stories_model());
    ASSERT_TRUE(model) << model.error().message();
    model_ = std::make_unique<Model>(std::move(*model));
    pool_ = std::make_unique<cpu::ThreadPool>(1);
  }

  // Saves the first n prompt tokens into root from a fresh session.
  Result<PromptCacheSaveResult> save(const fs::path& root, int n) {
    Session session(*model_, *pool_);
    EXPECT_TRUE(session.prefill(test::cache_prefix(n)));
    return session.save_prompt_cache(root, test::kCacheDescriptor, test::cache_prefix(n));
  }

  Status load(const fs::path& root, int n) {
    Session session(*model_, *pool_);
    return session.load_prompt_cache(root, test::kCacheDescriptor, test::cache_prefix(n));
  }

  fs::path root() const { return dir_.path() / "cache"; }
  fs::path rank0() const { return rank_folder(root(), 0); }

  std::unique_ptr<Model> model_;
  std::unique_ptr<cpu::ThreadPool> pool_;
  test::TempDir dir_;
};

TEST_F(PromptCacheSafetyTest, ASaveNeverWritesThroughALinkedGenerationsFolder) {
  // The reproduction of the data loss: generations/ is a link to a user's folder.
  const fs::path user = dir_.path() / "user";
  write_text(user / "sub" / "b", "x");
  fs::create_directories(rank0());
  fs::create_directory_symlink(user, rank0() / "generations");
  auto saved = save(root(), 5);
  ASSERT_FALSE(saved);
  EXPECT_EQ(saved.error().code(), ErrorCode::prompt_cache);
  EXPECT_NE(saved.error().message().find("is a symbolic link"), std::string::npos) << saved.error().message();
  EXPECT_EQ(read_text(user / "sub" / "b"), "x");
  EXPECT_EQ(std::distance(fs::directory_iterator(user), fs::directory_iterator()), 1);
}

TEST_F(PromptCacheSafetyTest, ASaveNeverWritesThroughALinkedRankFolder) {
  const fs::path user = dir_.path() / "user";
  write_text(user / "generations" / "1-ab" / "kv.bin", "keep");
  fs::create_directories(root());
  fs::create_directory_symlink(user, rank0());
  auto saved = save(root(), 5);
  ASSERT_FALSE(saved);
  EXPECT_NE(saved.error().message().find("is a symbolic link"), std::string::npos) << saved.error().message();
  EXPECT_EQ(read_text(user / "generations" / "1-ab" / "kv.bin"), "keep");
}

TEST_F(PromptCacheSafetyTest, ACommitRemovesOnlyTheCachesOwnFiles) {
  ASSERT_TRUE(save(root(), 5));
  const fs::path generations = rank0() / "generations";
  const fs::path outside = dir_.path() / "outside";
  // Things that are not the cache's, beside and inside what is.
  write_text(generations / "notes.txt", "mine");
  write_text(generations / "photos" / "a.jpg", "mine");
  write_text(generations / "3-abc" / "kv.bin", "old shard");
  write_text(generations / "3-abc" / "keep.txt", "mine");
  write_text(rank0() / ".staging-holiday" / "plan.txt", "mine");
  write_text(rank0() / ".staging-4-abcd" / "keep.txt", "mine");
  write_text(outside / "kv.bin", "mine");
  write_text(outside / "manifest.json", "{}");
  fs::create_directory_symlink(outside, generations / "5-abcdef");
  write_text(generations / "6-ef" / "kv.bin", "a dead generation");

  auto saved = save(root(), 7);
  ASSERT_TRUE(saved) << saved.error().message();
  EXPECT_EQ(read_text(generations / "notes.txt"), "mine");
  EXPECT_EQ(read_text(generations / "photos" / "a.jpg"), "mine");
  EXPECT_EQ(read_text(generations / "3-abc" / "keep.txt"), "mine");
  EXPECT_FALSE(fs::exists(generations / "3-abc" / "kv.bin")) << "the cache's own file goes";
  EXPECT_EQ(read_text(rank0() / ".staging-holiday" / "plan.txt"), "mine");
  EXPECT_EQ(read_text(rank0() / ".staging-4-abcd" / "keep.txt"), "mine");
  EXPECT_EQ(read_text(outside / "kv.bin"), "mine");
  EXPECT_EQ(read_text(outside / "manifest.json"), "{}");
  EXPECT_FALSE(fs::exists(generations / "6-ef")) << "a generation of the cache's own goes whole";
  EXPECT_TRUE(load(root(), 7)) << "the new save is live";
}

TEST_F(PromptCacheSafetyTest, ASecondWriterIsRefusedWhileTheFirstHoldsTheLock) {
  auto first = save(root(), 5);
  ASSERT_TRUE(first);
  {
    auto lock = FileLock::try_take(rank0() / "LOCK");
    ASSERT_TRUE(lock && *lock) << "nobody holds the lock between saves";
    auto second = save(root(), 7);
    ASSERT_FALSE(second);
    EXPECT_NE(second.error().message().find("another writer"), std::string::npos) << second.error().message();
    EXPECT_TRUE(load(root(), 5)) << "the refused save changed nothing";
    auto busy = recover_prompt_cache(root());
    ASSERT_TRUE(busy);
    EXPECT_EQ(busy->action, RecoveryAction::busy);
  }
  EXPECT_TRUE(save(root(), 7)) << "the lock is released with its holder";
}

TEST_F(PromptCacheSafetyTest, AWriterThatDiedLeavesNoLockBehind) {
  ASSERT_TRUE(save(root(), 5));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto lock = FileLock::try_take(rank0() / "LOCK");
    _exit(lock && *lock ? 0 : 1);  // dies holding it
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(save(root(), 7));
}

TEST_F(PromptCacheSafetyTest, OutOfRangeManifestNumbersAreRefused) {
  ASSERT_TRUE(save(root(), 5));
  std::ifstream current(rank0() / "CURRENT");
  std::string name;
  std::getline(current, name);
  const fs::path manifest_path = rank0() / "generations" / name / "manifest.json";
  const auto original = nlohmann::json::parse(read_text(manifest_path));
  ASSERT_TRUE(manifest_from_json(original.dump()));

  struct Case {
    std::vector<std::string> path;
    nlohmann::json value;
  };
  const std::vector<Case> cases = {
      {{"prefix_token_count"}, -1},
      {{"prefix_token_count"}, 99999999999LL},
      {{"prefix_token_count"}, 0},
      {{"prefix_token_count"}, 2.5},
      {{"prefix_token_count"}, "5"},
      {{"prefix_token_count"}, 18446744073709551615ULL},
      {{"kv_dim"}, -32},
      {{"topology", "ranks"}, 0},
      {{"topology", "rank"}, 1},
      {{"topology", "unit_count"}, -5},
      {{"epoch"}, -1},
      {{"save_id"}, "../../etc"},
      {{"format_version"}, 4294967297LL},
  };
  for (const auto& c : cases) {
    auto edited = original;
    auto* field = &edited;
    for (const auto& key : c.path) field = &(*field)[key];
    *field = c.value;
    auto parsed = manifest_from_json(edited.dump());
    const std::string what = c.path.back() + " = " + c.value.dump();
    ASSERT_FALSE(parsed) << what;
    EXPECT_EQ(parsed.error().code(), ErrorCode::prompt_cache) << what;
    EXPECT_NE(parsed.error().message().find(c.path.back()), std::string::npos) << parsed.error().message();
  }
  // On disk: refused by the load, never taken for another prompt's prefix.
  auto edited = original;
  edited["prefix_token_count"] = -1;
  std::ofstream(manifest_path) << edited.dump();
  Status loaded = load(root(), 5);
  ASSERT_FALSE(loaded);
  EXPECT_NE(loaded.error().message().find("prefix_token_count"), std::string::npos) << loaded.error().message();
}

TEST_F(PromptCacheSafetyTest, ALoopOfLinksIsReportedNotThrown) {
  ASSERT_TRUE(save(root(), 5));
  std::ifstream current(rank0() / "CURRENT");
  std::string name;
  std::getline(current, name);
  // The live generation becomes a link to itself.
  const fs::path generation = rank0() / "generations" / name;
  fs::rename(generation, rank0() / "generations" / "moved");
  fs::create_directory_symlink(generation, generation);
  Status loaded = load(root(), 5);
  ASSERT_FALSE(loaded);
  EXPECT_NE(loaded.error().message().find("cannot open the generation"), std::string::npos) << loaded.error().message();
  EXPECT_EQ(loaded.error().message().find("leaves the cache root"), std::string::npos) << loaded.error().message();

  // The root itself a loop: every entry point answers with an error.
  const fs::path loop = dir_.path() / "loop";
  fs::create_directory_symlink(loop, loop);
  EXPECT_FALSE(read_live_generation(loop, 0));
  EXPECT_FALSE(load(loop, 5));
  auto saved = save(loop, 5);
  ASSERT_FALSE(saved);
  EXPECT_NE(saved.error().message().find(loop.string()), std::string::npos) << saved.error().message();
  auto recovered = recover_prompt_cache(loop);
  EXPECT_TRUE(recovered && recovered->action == RecoveryAction::none);
}

}  // namespace
}  // namespace accord
