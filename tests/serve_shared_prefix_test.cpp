// `accord serve`'s prefix store and `n` (runtime/serve/scheduler.hpp): a
// request starts from a prompt another request left in the store, several
// completions share one prefill, and under a KV budget the store's
// snapshots go before an idle slot's tokens. Every answer must be the one
// an empty slot gives, bit for bit (invariant 1).
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/model/kv_pool.hpp"
#include "runtime/serve/prefix_store.hpp"
#include "tests/serve_slots.hpp"

namespace accord {
namespace {

using nlohmann::json;
using ServeSharedPrefix = test::ServeSlotsTest;

const std::string kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
    "friends every day.";

json completion(const std::string& prompt, int max_tokens = 10) {
  return {{"model", "stories260K"}, {"prompt", prompt}, {"max_tokens", max_tokens},
          {"temperature", 0.8},     {"seed", 7},        {"logprobs", 2}};
}

bool has_line(const std::string& metrics, const std::string& line) {
  return metrics.find("\n" + line + "\n") != std::string::npos;
}

// One slot: the second conversation moved its tokens away from the first
// prompt, so only the store still holds it.
TEST_F(ServeSharedPrefix, ARequestStartsFromAPromptTheStoreKept) {
  auto store = std::make_shared<serve::PrefixStore>(serve::PrefixStoreLimits{}, block_bytes());
  auto server = start(1, serve::SlotReuse::prefix, false, nullptr, store);
  auto cold = start(1, serve::SlotReuse::none);
  const json first = post(*server, "/v1/completions", completion(kStory + " One day she found a red ball."));
  ASSERT_GT(first["usage"]["prompt_tokens"].get<int>(), KvCache::kBlockPositions);
  post(*server, "/v1/completions", completion("Where do birds go in the winter?"));
  const json body = completion(kStory + " Her dog was named Max.");
  const json again = post(*server, "/v1/completions", body);
  const json expected = post(*cold, "/v1/completions", body);
  EXPECT_GE(cached(again), KvCache::kBlockPositions);
  EXPECT_LT(cached(again), again["usage"]["prompt_tokens"].get<int>());
  EXPECT_EQ(again["choices"], expected["choices"]);
  const std::string metrics = server->metrics.prometheus_text();
  EXPECT_TRUE(has_line(metrics, "accord_prefix_store_hits_total 1")) << metrics;
  EXPECT_TRUE(has_line(metrics, "accord_prefix_store_lookups_total 3")) << metrics;
}

// Each completion samples with the next seed, as a request of its own with
// that seed would; the prompt is prefilled once and counted once.
TEST_F(ServeSharedPrefix, SeveralCompletionsAnswerAsOneRequestEachWithTheNextSeed) {
  auto server = start(1, serve::SlotReuse::prefix);
  auto cold = start(1, serve::SlotReuse::none);
  json body = completion(kStory, 12);
  body["n"] = 3;
  const json reply = post(*server, "/v1/completions", body);
  ASSERT_EQ(reply["choices"].size(), 3u);
  int completion_tokens = 0;
  for (int i = 0; i < 3; ++i) {
    json alone = completion(kStory, 12);
    alone["seed"] = 7 + i;
    const json expected = post(*cold, "/v1/completions", alone);
    json choice = reply["choices"][i];
    EXPECT_EQ(choice["index"], i);
    choice["index"] = 0;
    EXPECT_EQ(choice, expected["choices"][0]) << "choice " << i;
    EXPECT_EQ(reply["usage"]["prompt_tokens"], expected["usage"]["prompt_tokens"]);
    completion_tokens += expected["usage"]["completion_tokens"].get<int>();
  }
  EXPECT_EQ(reply["usage"]["completion_tokens"], completion_tokens);
  EXPECT_NE(reply["choices"][0]["text"], reply["choices"][1]["text"]) << "the seeds differ";
}

// A pool of three blocks. The first prompt fills one block and part of a
// second; its snapshot shares both with its slot, which copies the second
// when it writes its answer there: three blocks. The next conversation,
// on the other slot, needs one: the snapshot's block goes back, and the
// first slot keeps its tokens.
TEST_F(ServeSharedPrefix, UnderABudgetTheStoreGivesBackItsBlocksBeforeAnIdleSlot) {
  auto kv_pool = std::make_shared<KvPool>(3 * block_bytes());
  auto store = std::make_shared<serve::PrefixStore>(serve::PrefixStoreLimits{}, block_bytes());
  auto server = start(2, serve::SlotReuse::prefix, false, kv_pool, store);
  const json first = completion(kStory, 8);
  const int prompt_tokens = post(*server, "/v1/completions", first)["usage"]["prompt_tokens"];
  ASSERT_GT(prompt_tokens, KvCache::kBlockPositions);
  ASSERT_LE(prompt_tokens + 8, 2 * KvCache::kBlockPositions) << "the test's arithmetic needs two blocks";
  EXPECT_EQ(kv_pool->used_bytes(), 3 * block_bytes());
  const json other = post(*server, "/v1/completions", completion("Where do birds go?", 8));
  ASSERT_LE(other["usage"]["prompt_tokens"].get<int>() + 8, KvCache::kBlockPositions);
  EXPECT_EQ(kv_pool->used_bytes(), 3 * block_bytes());
  EXPECT_EQ(store->counts().entries, 0u);
  EXPECT_TRUE(has_line(server->metrics.prometheus_text(), "accord_prefix_store_evictions_total 1"));
  EXPECT_EQ(cached(post(*server, "/v1/completions", first)), prompt_tokens - 1) << "the first slot kept its tokens";
}

}  // namespace
}  // namespace accord
