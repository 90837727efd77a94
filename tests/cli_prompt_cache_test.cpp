// `accord generate --prompt-cache` against what an adversarial user tried:
// a linked generations folder (the cache must not delete the user's
// files), a save killed half-way through publication on three ranks (the
// next run heals it), several writers at once, a missing rank folder, a
// loop of links as the root, and honest reports throughout.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "tests/support.hpp"

namespace accord {
namespace {

namespace fs = std::filesystem;
using test::run_accord;

constexpr char kPrompt[] = "Once upon a time there";

std::vector<std::string> cached_run(const fs::path& cache, std::vector<std::string> extra = {},
                                    const std::string& prompt = kPrompt) {
  std::vector<std::string> args = {
      "generate", "--model", test::stories_model(), "--tokenizer", test::stories_tokenizer(),
      "--prompt", prompt,    "--temperature",       "0",           "--max-tokens",
      "12",       "--json",  "--prompt-cache",      cache.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The JSON object a run printed on one line (after any warnings), and its
// exit code.
struct CachedRun {
  int exit_code;
  std::string output;
  nlohmann::json json;
};

CachedRun run(const std::vector<std::string>& args) {
  const auto result = run_accord(args);
  const auto brace = result.output.find('{');
  nlohmann::json json;
  if (brace != std::string::npos) {
    const auto end = result.output.find('\n', brace);  // an error line may follow the object
    json = nlohmann::json::parse(result.output.substr(brace, end - brace), nullptr, false);
  }
  return {result.exit_code, result.output, json};
}

std::string reason(const CachedRun& r) { return r.json.value("prompt_cache_reason", std::string()); }

TEST(CliPromptCache, NeverDeletesTheFilesOfALinkedGenerationsFolder) {
  test::TempDir dir;
  const fs::path user = dir.path() / "v";
  fs::create_directories(user / "sub");
  std::ofstream(user / "sub" / "b") << "x";
  fs::create_directories(dir.path() / "c" / "rank-00");
  fs::create_directory_symlink(user, dir.path() / "c" / "rank-00" / "generations");
  const CachedRun r = run(cached_run(dir.path() / "c"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.json.at("prompt_cache"), "failed");
  EXPECT_NE(reason(r).find("symbolic link"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(user / "sub" / "b"));
}

TEST(CliPromptCache, ASaveKilledDuringPublicationOnThreeRanksIsHealedOrRedone) {
  test::TempDir dir;
  const fs::path cache = dir.path() / "c";
  const CachedRun cold = run(cached_run(dir.path() / "unused", {"--ranks", "3"}));
  ASSERT_EQ(cold.exit_code, 0) << cold.output;

  const CachedRun killed = run(cached_run(cache, {"--ranks", "3", "--fault", "1:PromptCacheSavePublication:exit"}));
  EXPECT_EQ(killed.exit_code, 1) << killed.output;
  EXPECT_EQ(killed.json.at("prompt_cache"), "failed") << "nothing was saved on every rank";
  EXPECT_NE(reason(killed).find("poisoned"), std::string::npos) << killed.output;

  // Whether the other ranks published before the exit poisoned the session
  // depends on timing: the next run heals their publication and hits, or
  // finds nothing published and saves. Either way the run after that hits.
  const CachedRun next = run(cached_run(cache, {"--ranks", "3"}));
  ASSERT_EQ(next.exit_code, 0) << next.output;
  const bool healed = next.json.value("prompt_cache_recovery", "").find("every rank now names") != std::string::npos;
  EXPECT_EQ(next.json.at("prompt_cache"), healed ? "hit" : "saved") << next.output;
  EXPECT_EQ(next.json.at("generated_tokens"), cold.json.at("generated_tokens"));
  EXPECT_EQ(next.json.at("text"), cold.json.at("text"));
  const CachedRun after = run(cached_run(cache, {"--ranks", "3"}));
  EXPECT_EQ(after.json.at("prompt_cache"), "hit") << after.output;
  EXPECT_EQ(after.json.at("generated_tokens"), cold.json.at("generated_tokens"));
}

// Starts `accord` with `args`, its output discarded, and kills it with
// SIGKILL after `delay`.
void run_and_kill(const std::vector<std::string>& args, std::chrono::microseconds delay) {
  std::vector<std::string> argv_strings = {ACCORD_BINARY};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& arg : argv_strings) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  std::this_thread::sleep_for(delay);
  ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
}

TEST(CliPromptCache, ARunKilledAtAnyMomentNeverLeavesACacheThatGivesOtherTokens) {
  // Wherever the kill lands (loading, prefilling, preparing, publishing on
  // one rank and not another, committing), the next run heals or ignores
  // what it left, and prints the tokens of a run without a cache.
  test::TempDir dir;
  const CachedRun cold = run(cached_run(dir.path() / "unused", {"--ranks", "3"}));
  ASSERT_EQ(cold.exit_code, 0) << cold.output;
  std::mt19937 random(20);  // fixed: the same delays on every machine, wherever they land
  for (int attempt = 0; attempt < 12; ++attempt) {
    const fs::path cache = dir.path() / "c" / std::to_string(attempt);
    // Every other attempt kills a save over an existing cache of another prompt.
    if (attempt % 2 == 1) {
      ASSERT_EQ(run(cached_run(cache, {"--ranks", "3"}, "Lily had a ball")).exit_code, 0);
    }
    run_and_kill(cached_run(cache, {"--ranks", "3"}), std::chrono::microseconds(random() % 25000));
    for (const char* expected : {"hit or saved", "hit"}) {
      const CachedRun after = run(cached_run(cache, {"--ranks", "3"}));
      ASSERT_EQ(after.exit_code, 0) << after.output;
      const std::string outcome = after.json.at("prompt_cache");
      EXPECT_TRUE(outcome == "hit" || (outcome == "saved" && std::string(expected) != "hit"))
          << "attempt " << attempt << ", expected " << expected << ": " << after.output;
      EXPECT_EQ(after.json.at("generated_tokens"), cold.json.at("generated_tokens")) << "attempt " << attempt;
    }
  }
}

TEST(CliPromptCache, WritersAtOnceLeaveOneWholeCache) {
  test::TempDir dir;
  const fs::path cache = dir.path() / "c";
  std::vector<std::future<CachedRun>> writers;
  for (int i = 0; i < 3; ++i) writers.push_back(std::async(std::launch::async, [&] { return run(cached_run(cache)); }));
  int saved = 0;
  for (auto& writer : writers) {
    const CachedRun r = writer.get();
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string outcome = r.json.at("prompt_cache");
    saved += outcome == "saved";
    // A writer that found the lock taken says so and changes nothing.
    if (outcome == "failed") {
      EXPECT_NE(reason(r).find("another writer"), std::string::npos) << r.output;
    } else {
      EXPECT_TRUE(outcome == "saved" || outcome == "hit") << r.output;
    }
  }
  EXPECT_GE(saved, 1);
  const CachedRun after = run(cached_run(cache));
  EXPECT_EQ(after.json.at("prompt_cache"), "hit") << after.output;
}

TEST(CliPromptCache, AMissingRankFolderIsSavedAgainLikeAMissingFirstRank) {
  for (const char* missing : {"rank-00", "rank-01"}) {
    test::TempDir dir;
    const fs::path cache = dir.path() / "c";
    ASSERT_EQ(run(cached_run(cache, {"--ranks", "2"})).json.at("prompt_cache"), "saved");
    fs::remove_all(cache / missing);
    const CachedRun r = run(cached_run(cache, {"--ranks", "2"}));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.json.at("prompt_cache"), "saved") << missing << ": " << r.output;
    EXPECT_EQ(run(cached_run(cache, {"--ranks", "2"})).json.at("prompt_cache"), "hit") << missing;
  }
}

TEST(CliPromptCache, ALoopOfLinksAsTheRootIsRejectedWithAReason) {
  test::TempDir dir;
  const fs::path loop = dir.path() / "loop";
  fs::create_directory_symlink(loop, loop);
  const CachedRun r = run(cached_run(loop));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.json.at("prompt_cache"), "rejected") << r.output;
  EXPECT_NE(reason(r).find("Too many levels of symbolic links"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("unexpected failure"), std::string::npos) << r.output;
}

TEST(CliPromptCache, AnOutOfRangePrefixCountIsRejectedNotOverwritten) {
  test::TempDir dir;
  const fs::path cache = dir.path() / "c";
  ASSERT_EQ(run(cached_run(cache)).json.at("prompt_cache"), "saved");
  std::ifstream current(cache / "rank-00" / "CURRENT");
  std::string name;
  std::getline(current, name);
  const fs::path manifest = cache / "rank-00" / "generations" / name / "manifest.json";
  for (const long long count : {-1LL, 99999999999LL}) {
    std::ifstream in(manifest);
    auto json = nlohmann::json::parse(in);
    json["prefix_token_count"] = count;
    std::ofstream(manifest) << json.dump();
    const CachedRun r = run(cached_run(cache));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.json.at("prompt_cache"), "rejected") << count << ": " << r.output;
    EXPECT_NE(reason(r).find("prefix_token_count"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace accord
