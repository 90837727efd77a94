// The prompt cache: a hit equals a cold prefill bit for bit; every way a
// cache can be wrong is refused before live state changes; a save that dies
// half-way leaves the previous cache loadable.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/rank/prompt_cache.hpp"
#include "runtime/session/session.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

namespace fs = std::filesystem;

class PromptCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = Model::load(test::stories_model());
    ASSERT_TRUE(model) << model.error().message();
    model_ = std::make_unique<Model>(std::move(*model));
    pool_ = std::make_unique<cpu::ThreadPool>(2);
  }

  std::unique_ptr<Session> new_session() { return std::make_unique<Session>(*model_, *pool_); }

  // Saves the first n prompt tokens into root from a fresh session.
  void save(const fs::path& root, int n) {
    auto session = new_session();
    ASSERT_TRUE(session->prefill(test::cache_prefix(n)));
    auto saved = session->save_prompt_cache(root, test::kCacheDescriptor, test::cache_prefix(n));
    ASSERT_TRUE(saved) << saved.error().message();
    EXPECT_EQ(saved->prefix_token_count, n);
  }

  fs::path live_folder(const fs::path& root) {
    std::ifstream current(rank_folder(root, 0) / "CURRENT");
    std::string name;
    std::getline(current, name);
    return rank_folder(root, 0) / "generations" / name;
  }

  // Expects load to be refused with `fragment` in the message, and the
  // live state of a session that already holds tokens to be untouched.
  void expect_refused(const fs::path& root, std::span<const int> ids, const std::string& fragment,
                      Session* session = nullptr) {
    auto own = new_session();
    if (session == nullptr) session = own.get();
    if (session->position() == 0) {
      ASSERT_TRUE(session->prefill(std::vector<int>{1, 50, 60}));
    }
    const std::string digest = session->state_digest();
    Status loaded = session->load_prompt_cache(root, test::kCacheDescriptor, ids);
    ASSERT_FALSE(loaded) << "expected refusal: " << fragment;
    EXPECT_EQ(loaded.error().code(), ErrorCode::prompt_cache) << loaded.error().message();
    EXPECT_NE(loaded.error().message().find(fragment), std::string::npos) << loaded.error().message();
    EXPECT_EQ(session->state_digest(), digest);
    EXPECT_TRUE(session->decode(5)) << "the session must stay usable";
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<cpu::ThreadPool> pool_;
  test::TempDir dir_;
};

TEST_F(PromptCacheTest, AHitGivesTheLogitsOfAColdPrefill) {
  const int n = static_cast<int>(test::kCachePrompt.size()) - 1;
  save(dir_.path(), n);
  auto cold = new_session();
  const auto expected = test::to_vector(cold->prefill(test::kCachePrompt)->logits);

  auto warm = new_session();
  ASSERT_TRUE(warm->prefill(std::vector<int>{1, 9, 9, 9}));  // some unrelated state first
  Status loaded = warm->load_prompt_cache(dir_.path(), test::kCacheDescriptor, test::cache_prefix(n));
  ASSERT_TRUE(loaded) << loaded.error().message();
  EXPECT_EQ(warm->position(), n);
  const auto got = test::to_vector(warm->decode(test::kCachePrompt.back())->logits);
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_EQ(0, std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)));
  EXPECT_EQ(warm->state_digest().size(), 32u);
}

TEST_F(PromptCacheTest, TheLayoutOnDiskIsAsDocumented) {
  save(dir_.path(), 5);
  const fs::path gen = live_folder(dir_.path());
  ASSERT_TRUE(fs::is_regular_file(gen / "manifest.json"));
  ASSERT_TRUE(fs::is_regular_file(gen / "kv.bin"));
  std::ifstream in(gen / "manifest.json");
  const auto manifest = nlohmann::json::parse(in);
  EXPECT_EQ(manifest.at("format_version"), 1);
  EXPECT_EQ(manifest.at("arithmetic_version"), cpu::kArithmeticVersion);
  EXPECT_EQ(manifest.at("prefix_token_count"), 5);
  EXPECT_EQ(manifest.at("topology").at("ranks"), 1);
  EXPECT_EQ(manifest.at("shards").at(0).at("bytes"), 5u * 5 * 32 * 2 * 4);
  EXPECT_EQ(fs::file_size(gen / "kv.bin"), 5u * 5 * 32 * 2 * 4);
  // A second save replaces the first; superseded generations are removed.
  save(dir_.path(), 6);
  EXPECT_FALSE(fs::exists(gen));
  int generations = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(rank_folder(dir_.path(), 0) / "generations")) {
    ++generations;
  }
  EXPECT_EQ(generations, 1);
}

TEST_F(PromptCacheTest, RefusesAFlippedByteAndATruncatedShard) {
  save(dir_.path(), 5);
  const fs::path shard = live_folder(dir_.path()) / "kv.bin";
  auto bytes = test::read_bytes(shard.string());
  auto flipped = bytes;
  flipped[flipped.size() / 2] ^= std::byte{0x01};
  test::write_bytes(shard.string(), flipped);
  expect_refused(dir_.path(), test::cache_prefix(5), "corrupted");
  auto truncated = bytes;
  truncated.resize(bytes.size() - 4);
  test::write_bytes(shard.string(), truncated);
  expect_refused(dir_.path(), test::cache_prefix(5), "bytes, the manifest says");
  test::write_bytes(shard.string(), bytes);
  auto session = new_session();
  EXPECT_TRUE(session->load_prompt_cache(dir_.path(), test::kCacheDescriptor, test::cache_prefix(5)));
}

TEST_F(PromptCacheTest, RefusesAnotherModel) {
  SyntheticModelOptions a{model_->config(), 1, llama2c::Layout::legacy};
  SyntheticModelOptions b = a;
  b.seed = 2;
  const Model first = test::synthetic_model(dir_, a, "a.bin");
  const Model second = test::synthetic_model(dir_, b, "b.bin");
  Session saver(first, *pool_);
  ASSERT_TRUE(saver.prefill(test::cache_prefix(5)));
  ASSERT_TRUE(saver.save_prompt_cache(dir_.path() / "cache", test::kCacheDescriptor, test::cache_prefix(5)));
  Session loader(second, *pool_);
  expect_refused(dir_.path() / "cache", test::cache_prefix(5), "another model", &loader);
}

TEST_F(PromptCacheTest, RefusesOtherPrefixTokensDescriptorAndInput) {
  save(dir_.path(), 5);
  std::vector<int> other(test::kCachePrompt.begin(), test::kCachePrompt.begin() + 5);
  other[3] = 300;
  expect_refused(dir_.path(), other, "other prefix tokens");
  expect_refused(dir_.path(), test::cache_prefix(4), "other prefix tokens");
  auto session = new_session();
  Status wrong_name = session->load_prompt_cache(dir_.path(), {"another", "tests"}, test::cache_prefix(5));
  ASSERT_FALSE(wrong_name);
  EXPECT_NE(wrong_name.error().message().find("saved as 'story-opening'"), std::string::npos);
  Status wrong_input =
      session->load_prompt_cache_for_input(dir_.path(), test::kCacheDescriptor, test::cache_prefix(5), "image:42");
  ASSERT_FALSE(wrong_input);
  EXPECT_NE(wrong_input.error().message().find("another prepared input"), std::string::npos);
}

void edit_manifest(const fs::path& generation, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json manifest;
  {
    std::ifstream in(generation / "manifest.json");
    manifest = nlohmann::json::parse(in);
  }
  edit(manifest);
  std::ofstream(generation / "manifest.json", std::ios::trunc) << manifest.dump();
}

TEST_F(PromptCacheTest, RefusesAnUnknownVersionAndAnotherTopology) {
  save(dir_.path(), 5);
  edit_manifest(live_folder(dir_.path()), [](nlohmann::json& m) { m["format_version"] = 99; });
  expect_refused(dir_.path(), test::cache_prefix(5), "unknown prompt cache format version 99");
  edit_manifest(live_folder(dir_.path()), [](nlohmann::json& m) {
    m["format_version"] = 1;
    m["topology"]["ranks"] = 2;
  });
  expect_refused(dir_.path(), test::cache_prefix(5), "2 rank(s)");
  edit_manifest(live_folder(dir_.path()), [](nlohmann::json& m) { m.erase("epoch"); });
  expect_refused(dir_.path(), test::cache_prefix(5), "malformed manifest");
}

TEST_F(PromptCacheTest, RefusesKeysAndValuesOfAnotherArithmetic) {
  // A build whose kernels round differently would not give a cold
  // prefill's bits from such a cache; one that predates the field was
  // version 1.
  save(dir_.path(), 5);
  edit_manifest(live_folder(dir_.path()), [](nlohmann::json& m) { m["arithmetic_version"] = 1; });
  expect_refused(dir_.path(), test::cache_prefix(5), "version 1 of the kernels' arithmetic");
  edit_manifest(live_folder(dir_.path()), [](nlohmann::json& m) { m.erase("arithmetic_version"); });
  expect_refused(dir_.path(), test::cache_prefix(5), "version 1 of the kernels' arithmetic");
  edit_manifest(live_folder(dir_.path()), [](nlohmann::json& m) { m["arithmetic_version"] = 0; });
  expect_refused(dir_.path(), test::cache_prefix(5), "arithmetic_version");
  edit_manifest(live_folder(dir_.path()), [](nlohmann::json& m) { m["arithmetic_version"] = cpu::kArithmeticVersion; });
  auto session = new_session();
  Status loaded = session->load_prompt_cache(dir_.path(), test::kCacheDescriptor, test::cache_prefix(5));
  EXPECT_TRUE(loaded) << loaded.error().message();
}

TEST_F(PromptCacheTest, RefusesPathsThatLeaveTheRoot) {
  const fs::path root = dir_.path() / "cache";
  save(root, 5);
  const fs::path current = rank_folder(root, 0) / "CURRENT";
  const fs::path generation = live_folder(root);

  // CURRENT naming something outside generations/.
  std::ofstream(current, std::ios::trunc) << "../../../outside\n";
  expect_refused(root, test::cache_prefix(5), "not a generation");

  // A manifest naming a shard outside its generation.
  std::ofstream(current, std::ios::trunc) << generation.filename().string() << "\n";
  edit_manifest(generation, [](nlohmann::json& m) { m["shards"][0]["file"] = "../../../../kv.bin"; });
  expect_refused(root, test::cache_prefix(5), "leaves");

  // A generation that is a symbolic link out of the root.
  edit_manifest(generation, [](nlohmann::json& m) { m["shards"][0]["file"] = "kv.bin"; });
  const fs::path outside = dir_.path() / "outside-generation";
  fs::rename(generation, outside);
  fs::create_directory_symlink(outside, generation);
  expect_refused(root, test::cache_prefix(5), "leaves the cache root");
}

TEST_F(PromptCacheTest, ASaveKilledBeforePublicationLeavesTheOldCacheLoadable) {
  save(dir_.path(), 5);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child saves a longer prefix and dies right after writing its
    // shard, before the CURRENT switch. Threads do not survive fork, so it
    // builds its own pool and session.
    cpu::ThreadPool pool(1);
    Session session(*model_, pool);
    session.set_failure_hook([](Phase phase, std::uint64_t) -> Status {
      if (phase == Phase::PromptCacheSavePreparation) ::_exit(42);
      return {};
    });
    (void)session.prefill(test::cache_prefix(7));
    (void)session.save_prompt_cache(dir_.path(), test::kCacheDescriptor, test::cache_prefix(7));
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 42) << "the child did not die where planned";

  auto session = new_session();
  Status loaded = session->load_prompt_cache(dir_.path(), test::kCacheDescriptor, test::cache_prefix(5));
  EXPECT_TRUE(loaded) << loaded.error().message();
  // The next save succeeds and clears what the dead one left behind.
  save(dir_.path(), 7);
  for (const auto& entry : fs::directory_iterator(rank_folder(dir_.path(), 0))) {
    EXPECT_FALSE(entry.path().filename().string().starts_with(".staging-")) << entry.path();
  }
}

TEST_F(PromptCacheTest, AFailedPublicationIsReverted) {
  save(dir_.path(), 5);
  const fs::path old_generation = live_folder(dir_.path());
  auto session = new_session();
  ASSERT_TRUE(session->prefill(test::cache_prefix(7)));
  for (Phase phase : {Phase::PromptCacheSavePublication, Phase::MechanismCompletion}) {
    session->set_failure_hook(test::fail_every(phase));
    auto saved = session->save_prompt_cache(dir_.path(), test::kCacheDescriptor, test::cache_prefix(7));
    ASSERT_FALSE(saved);
    EXPECT_EQ(saved.error().phase(), to_string(phase));
    EXPECT_EQ(live_folder(dir_.path()), old_generation);
    auto reader = new_session();
    EXPECT_TRUE(reader->load_prompt_cache(dir_.path(), test::kCacheDescriptor, test::cache_prefix(5)));
  }
  session->set_failure_hook({});
  EXPECT_TRUE(session->save_prompt_cache(dir_.path(), test::kCacheDescriptor, test::cache_prefix(7)));
  EXPECT_NE(live_folder(dir_.path()), old_generation);
}

// runtime/base/error.hpp: when a failed save cannot undo its publication, no
// state can be proven, so the session refuses every call until a reset.
TEST_F(PromptCacheTest, AFailedReversalPoisonsTheSessionUntilAReset) {
  save(dir_.path(), 5);
  auto session = new_session();
  ASSERT_TRUE(session->prefill(test::cache_prefix(7)));
  const fs::path current = rank_folder(dir_.path(), 0) / "CURRENT";
  session->set_failure_hook([&](Phase phase, std::uint64_t) -> Status {
    if (phase != Phase::PromptCacheSavePublication) return {};
    // A directory where CURRENT was: putting the old CURRENT back fails.
    fs::remove(current);
    fs::create_directories(current / "blocked");
    return Error(ErrorCode::mechanism, "injected");
  });
  auto saved = session->save_prompt_cache(dir_.path(), test::kCacheDescriptor, test::cache_prefix(7));
  ASSERT_FALSE(saved);
  EXPECT_EQ(saved.error().code(), ErrorCode::commit_indeterminate);
  ASSERT_TRUE(saved.error().poison());
  EXPECT_EQ(saved.error().poison()->phase, "PromptCacheSavePublication");
  // The one rank could not restore: the publication's reversal failed.
  EXPECT_EQ(saved.error().poison()->rank, 0u);
  EXPECT_NE(saved.error().poison()->cause.find("rank 0 failed to restore"), std::string::npos)
      << saved.error().poison()->cause;
  EXPECT_EQ(session->report().last_outcome, "poisoned");
  session->set_failure_hook({});

  const std::string digest = session->state_digest();
  auto refused = session->decode(1);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), ErrorCode::commit_indeterminate);
  EXPECT_EQ(refused.error().poison(), saved.error().poison());
  EXPECT_FALSE(session->checkpoint());
  EXPECT_EQ(session->state_digest(), digest);

  ASSERT_TRUE(session->reset());
  EXPECT_FALSE(session->poison());
  EXPECT_TRUE(session->prefill(test::cache_prefix(3)));
  fs::remove_all(current);
}

TEST_F(PromptCacheTest, SaveRefusesAPrefixTheSessionDoesNotHold) {
  auto session = new_session();
  ASSERT_TRUE(session->prefill(test::cache_prefix(4)));
  auto saved = session->save_prompt_cache(dir_.path(), test::kCacheDescriptor, test::cache_prefix(5));
  ASSERT_FALSE(saved);
  EXPECT_EQ(saved.error().code(), ErrorCode::contract);
  EXPECT_FALSE(fs::exists(rank_folder(dir_.path(), 0) / "CURRENT"));
}

TEST_F(PromptCacheTest, PreparedInputIdentityTravelsWithTheCacheAndCheckpoints) {
  auto saver = new_session();
  ASSERT_TRUE(saver->prefill(test::cache_prefix(5)));
  ASSERT_TRUE(
      saver->save_prompt_cache_for_input(dir_.path(), test::kCacheDescriptor, test::cache_prefix(5), "image:42"));
  auto session = new_session();
  EXPECT_FALSE(session->committed_prompt_input_identity());
  ASSERT_TRUE(
      session->load_prompt_cache_for_input(dir_.path(), test::kCacheDescriptor, test::cache_prefix(5), "image:42"));
  auto identity = session->committed_prompt_input_identity();
  ASSERT_TRUE(identity);
  EXPECT_EQ(identity->prepared_input, "image:42");
  EXPECT_EQ(identity->token_count, 5);
  auto complete = session->checkpoint_complete();
  ASSERT_TRUE(complete);
  ASSERT_TRUE(session->decode(10));
  EXPECT_EQ(session->committed_prompt_input_identity()->prepared_input, "image:42");
  // A reset drops the identity, and no checkpoint survives it.
  ASSERT_TRUE(session->reset());
  EXPECT_FALSE(session->committed_prompt_input_identity());
  EXPECT_FALSE(session->rollback_complete(*complete));
  // rollback_complete restores state and identity together.
  ASSERT_TRUE(
      session->load_prompt_cache_for_input(dir_.path(), test::kCacheDescriptor, test::cache_prefix(5), "image:42"));
  auto after_load = session->checkpoint_complete();
  ASSERT_TRUE(session->decode(10));
  ASSERT_TRUE(session->rollback_complete(*after_load));
  EXPECT_EQ(session->committed_prompt_input_identity(), after_load->prompt);
}

}  // namespace
}  // namespace accord
