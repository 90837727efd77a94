// Prefix reuse: a session moved back to a prefix it holds (truncate),
// generation that prefills only what its target does not hold, serve's
// choice of a slot, and `accord serve` slots that keep their tokens between
// requests. Every token and log-probability must be the one an empty
// session gives (invariant 1: a token's rows do not depend on its step).
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

#include "actors/distributed_session.hpp"
#include "actors/distributed_target.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/generate/generator.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/stage_backend.hpp"
#include "runtime/serve/metrics.hpp"
#include "runtime/serve/scheduler.hpp"
#include "runtime/serve/service.hpp"
#include "tests/serve_responder.hpp"
#include "tests/serve_slots.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

using nlohmann::json;

// ---------------------------------------------------------------------------
// The slot a prompt goes to.

TEST(ServeSlotChoice, TheSlotThatKeepsMostOfThePromptWins) {
  const std::vector<int> prompt{1, 5, 6, 7, 8, 9, 10, 11, 12, 13};
  const std::vector<int> empty, three{1, 5, 6, 2}, five{1, 5, 6, 7, 8, 3};
  const std::vector<serve::SlotHolding> slots{{empty, 1}, {three, 2}, {five, 3}};
  EXPECT_EQ(serve::choose_slot(prompt, slots), 2u);
}

TEST(ServeSlotChoice, AmongEqualsTheLeastRecentlyUsedWins) {
  const std::vector<int> prompt{1, 5, 6, 7};
  const std::vector<int> empty, a{1, 5, 6, 9}, b{1, 5, 6, 8};
  EXPECT_EQ(serve::choose_slot(prompt, std::vector<serve::SlotHolding>{{a, 7}, {b, 4}, {empty, 2}}), 1u);
  EXPECT_EQ(serve::choose_slot(prompt, std::vector<serve::SlotHolding>{{empty, 9}, {empty, 3}, {empty, 5}}), 1u);
}

// As llama-server's --slot-prompt-similarity 0.1: a slot that would keep a
// tenth of the prompt or less (BOS alone, say) is taken as an empty one, so
// a new conversation does not evict another's tokens while a slot is free.
TEST(ServeSlotChoice, IdleSlotsAreEmptiedLeastRecentlyUsedFirstUntilThereIsRoom) {
  const std::vector<int> three = {1, 2, 3}, none = {};
  // Slot 2 was used least recently but holds nothing; then slot 1, slot 0.
  const std::vector<serve::SlotHolding> idle = {{three, 9}, {three, 5}, {none, 1}};
  const auto room_of = [](std::size_t tokens) { return static_cast<std::uint64_t>(tokens) * 10; };
  EXPECT_EQ(serve::slots_to_empty(idle, 40, 50, room_of), std::vector<std::size_t>{});
  EXPECT_EQ(serve::slots_to_empty(idle, 40, 20, room_of), std::vector<std::size_t>{1});
  EXPECT_EQ(serve::slots_to_empty(idle, 60, 20, room_of), (std::vector<std::size_t>{1, 0}));
  EXPECT_EQ(serve::slots_to_empty(idle, 90, 20, room_of), (std::vector<std::size_t>{1, 0}))
      << "all that hold any, when even they do not give room enough";
}

TEST(ServeSlotChoice, ASlotThatKeepsATenthOrLessCountsAsEmpty) {
  std::vector<int> prompt{1, 2};
  for (int i = 0; i < 18; ++i) prompt.push_back(100 + i);
  const std::vector<int> empty, two{1, 2, 7}, three{1, 2, 100, 7};
  EXPECT_EQ(serve::choose_slot(prompt, std::vector<serve::SlotHolding>{{two, 5}, {empty, 3}}), 1u);
  EXPECT_EQ(serve::choose_slot(prompt, std::vector<serve::SlotHolding>{{three, 5}, {empty, 3}}), 0u);
}

TEST(ServeSlotChoice, AtLeastThePromptsLastTokenIsComputed) {
  const std::vector<int> held{1, 2, 3, 4};
  EXPECT_EQ(reusable_prefix_length(held, std::vector<int>{1, 2, 3, 4}), 3);
  EXPECT_EQ(reusable_prefix_length(held, std::vector<int>{1, 2}), 1);
  EXPECT_EQ(reusable_prefix_length(held, std::vector<int>{1, 2, 9, 4, 5}), 2);
  EXPECT_EQ(reusable_prefix_length({}, std::vector<int>{1}), 0);
  EXPECT_EQ(reusable_prefix_length(held, {}), 0);
}

// ---------------------------------------------------------------------------
// Moving a session back.

using test::three_ranks;

const std::vector<int> kHeld{1, 10, 20, 30, 40, 50};
const std::vector<int> kPrompt{1, 10, 20, 99, 98, 97};

TEST(SessionTruncate, AKeptPrefixAndTheRestPrefilledGiveAnEmptySessionsLogits) {
  const Model model = test::load_stories_model();
  Session cold(model);
  auto expected = cold.prefill(kPrompt);
  ASSERT_TRUE(expected);
  const std::vector<float> logits = test::to_vector(expected->logits);
  Session held(model);
  ASSERT_TRUE(held.prefill(kHeld));
  ASSERT_TRUE(held.truncate(3));
  EXPECT_EQ(held.position(), 3);
  EXPECT_EQ(std::vector<int>(held.tokens().begin(), held.tokens().end()),
            std::vector<int>(kHeld.begin(), kHeld.begin() + 3));
  auto rest = held.prefill(std::span<const int>(kPrompt).subspan(3));
  ASSERT_TRUE(rest);
  EXPECT_EQ(test::to_vector(rest->logits), logits);
}

TEST(SessionTruncate, MovingForwardIsRefusedAndChangesNothing) {
  const Model model = test::load_stories_model();
  Session session(model);
  ASSERT_TRUE(session.prefill(kHeld));
  const std::string digest = session.state_digest();
  for (int position : {-1, 7}) {
    Status moved = session.truncate(position);
    ASSERT_FALSE(moved);
    EXPECT_EQ(moved.error().code(), ErrorCode::contract);
    EXPECT_TRUE(moved.error().before_state_mutation());
  }
  EXPECT_EQ(session.state_digest(), digest);
  EXPECT_TRUE(session.truncate(6));
  EXPECT_EQ(session.position(), 6);
}

// A checkpoint past the kept prefix: usable while its rows are as they
// were, refused once a step rewrote them.
TEST(SessionTruncate, ACheckpointPastTheKeptPrefixLastsUntilItsRowsAreRewritten) {
  const Model model = test::load_stories_model();
  Session session(model);
  ASSERT_TRUE(session.prefill(kHeld));
  auto whole = session.checkpoint();
  ASSERT_TRUE(whole);
  const std::string digest = session.state_digest();
  ASSERT_TRUE(session.truncate(2));
  ASSERT_TRUE(session.rollback(*whole));
  EXPECT_EQ(session.state_digest(), digest);
  ASSERT_TRUE(session.truncate(2));
  ASSERT_TRUE(session.decode(77));
  EXPECT_FALSE(session.rollback(*whole));
}

TEST(SessionTruncate, ThreeRanksKeepTheSamePrefix) {
  const Model model = test::load_stories_model();
  Session cold(model);
  auto expected = cold.prefill(kPrompt);
  ASSERT_TRUE(expected);
  const std::vector<float> logits = test::to_vector(expected->logits);
  auto held = DistributedSession::create(model, three_ranks());
  ASSERT_TRUE(held) << held.error().message();
  ASSERT_TRUE((*held)->prefill(kHeld));
  ASSERT_TRUE((*held)->truncate(3));
  EXPECT_EQ(std::vector<int>((*held)->tokens().begin(), (*held)->tokens().end()),
            std::vector<int>(kHeld.begin(), kHeld.begin() + 3));
  auto rest = (*held)->prefill(std::span<const int>(kPrompt).subspan(3));
  ASSERT_TRUE(rest);
  EXPECT_EQ(rest->logits, logits);
  auto digests = (*held)->rank_digests();
  ASSERT_TRUE(digests);
  EXPECT_EQ(digests->size(), 3u);
}

// ---------------------------------------------------------------------------
// Generation on a target that holds tokens.

struct Produced {
  std::vector<int> tokens;
  std::vector<float> logprobs;  // the prompt's (when asked for), then the generated tokens'
  int held = 0;                 // prompt tokens not prefilled
};

Produced produce(GenerationTarget& target, const Tokenizer& tokenizer, const std::string& prompt,
                 bool prompt_logprobs) {
  GenerationOptions options;
  options.max_tokens = 10;
  options.sampler = {0.9f, 0.95f, 1234};  // sampled: the random stream must not change either
  options.top_logprobs = 2;
  options.prompt_logprobs = prompt_logprobs;
  options.reuse_held_prefix = true;
  auto outcome = generate(target, tokenizer, prompt, options);
  EXPECT_TRUE(outcome) << outcome.error().message();
  if (!outcome) return {};
  Produced produced{outcome->generated_tokens, {}, outcome->cached_prompt_tokens()};
  for (const auto* logprobs : {&outcome->prompt_logprobs, &outcome->generated_logprobs}) {
    for (const TokenLogprobs& token : *logprobs) produced.logprobs.push_back(token.chosen.logprob);
  }
  return produced;
}

// The prompt tokens a target holding `held` keeps, counted here.
int shared_prefix(std::span<const int> held, const std::vector<int>& prompt) {
  int n = 0;
  while (n < static_cast<int>(held.size()) && n + 1 < static_cast<int>(prompt.size()) && held[n] == prompt[n]) ++n;
  return n;
}

// Turns on one target that keeps what each left, each against an empty
// target (`cold`): a prompt that extends the held tokens, the whole prompt
// held, one that shortens them, one that diverges, and one that asks for
// the prompt's log-probabilities (and so moves back to empty).
void expect_turns_as_cold(GenerationTarget& held, const std::function<Produced(const std::string&, bool)>& cold) {
  const Tokenizer tokenizer = test::load_stories_tokenizer();
  const std::string first = "Once upon a time, there was a little girl named Lily.";
  struct Turn {
    std::string prompt;
    bool prompt_logprobs;
    int least_held;
  };
  const std::vector<Turn> turns{{first, false, 0},
                                {first + " She loved to play outside.", false, 10},
                                {first + " She loved to play outside.", false, 20},
                                {"Once upon a time, there was a little", false, 6},
                                {"Once upon a time, a big dog ran home.", false, 4},
                                {"Once upon a time, a big dog ran home.", true, 0}};
  for (const Turn& turn : turns) {
    SCOPED_TRACE(turn.prompt);
    const std::vector<int> tokens = encode_prompt(tokenizer, turn.prompt).value();
    const int expected_held = turn.prompt_logprobs ? 0 : shared_prefix(held.tokens(), tokens);
    const Produced produced = produce(held, tokenizer, turn.prompt, turn.prompt_logprobs);
    const Produced expected = cold(turn.prompt, turn.prompt_logprobs);
    EXPECT_EQ(expected.held, 0);
    EXPECT_EQ(produced.held, expected_held);
    EXPECT_GE(produced.held, turn.least_held);
    EXPECT_EQ(produced.tokens, expected.tokens);
    EXPECT_EQ(produced.logprobs, expected.logprobs);
  }
}

// Turns on `held` (which keeps its tokens) against an empty single-rank
// session each.
void expect_turns_as_a_fresh_session(GenerationTarget& held, const Model& model, const Tokenizer& tokenizer) {
  expect_turns_as_cold(held, [&](const std::string& prompt, bool prompt_logprobs) {
    Session fresh(model);
    SessionTarget target(fresh);
    return produce(target, tokenizer, prompt, prompt_logprobs);
  });
}

TEST(GeneratorHeldPrefix, EveryTurnGivesAnEmptySessionsTokensAndLogprobs) {
  const Model model = test::load_stories_model();
  Session session(model);
  SessionTarget held(session);
  expect_turns_as_a_fresh_session(held, model, test::load_stories_tokenizer());
}

TEST(GeneratorHeldPrefix, ThreeRanksGiveASingleRanksTokensAndLogprobs) {
  const Model model = test::load_stories_model();
  auto session = DistributedSession::create(model, three_ranks());
  ASSERT_TRUE(session) << session.error().message();
  DistributedTarget held(**session, model);
  expect_turns_as_a_fresh_session(held, model, test::load_stories_tokenizer());
}

TEST(GeneratorHeldPrefix, WithoutReuseATargetThatHoldsTokensIsRefused) {
  const Model model = test::load_stories_model();
  const Tokenizer tokenizer = test::load_stories_tokenizer();
  Session session(model);
  ASSERT_TRUE(session.prefill(kHeld));
  auto outcome = generate(session, tokenizer, "Once", GenerationOptions{});
  ASSERT_FALSE(outcome);
  EXPECT_EQ(outcome.error().message(), "generation needs an empty session");
}

// ---------------------------------------------------------------------------
// accord serve's slots.

using ServePrefixReuse = test::ServeSlotsTest;

json chat(const std::vector<std::pair<std::string, std::string>>& messages) {
  json body = {{"model", "stories260K"}, {"max_tokens", 12}, {"temperature", 0.8}, {"seed", 7},
               {"logprobs", true},       {"top_logprobs", 2}};
  for (const auto& [role, content] : messages) body["messages"].push_back({{"role", role}, {"content", content}});
  return body;
}

const char* kChat = "/v1/chat/completions";

TEST_F(ServePrefixReuse, AChatsSecondTurnPrefillsOnlyItsNewTokensAndAnswersAsAnEmptySlot) {
  auto server = start(1, serve::SlotReuse::prefix);
  auto cold = start(1, serve::SlotReuse::none);
  const json first = post(*server, kChat, chat({{"user", "Tell me a story."}}));
  EXPECT_EQ(cached(first), 0);
  const std::string answer = first["choices"][0]["message"]["content"];
  const json body = chat({{"user", "Tell me a story."}, {"assistant", answer}, {"user", "And then?"}});
  const json second = post(*server, kChat, body);
  const json expected = post(*cold, kChat, body);
  EXPECT_EQ(cached(expected), 0);
  EXPECT_GT(cached(second), 8);
  EXPECT_LT(cached(second), second["usage"]["prompt_tokens"].get<int>());
  EXPECT_EQ(second["choices"], expected["choices"]);
  const std::string metrics = server->metrics.prometheus_text();
  EXPECT_NE(metrics.find("accord_prompt_tokens_cached_total " + std::to_string(cached(second)) + "\n"),
            std::string::npos)
      << metrics;
}

// Two conversations on two slots: a prompt that shares only BOS with the
// first goes to the empty slot, and the first's prompt again to the slot
// that holds it.
TEST_F(ServePrefixReuse, EachConversationReturnsToItsSlot) {
  auto server = start(2, serve::SlotReuse::prefix);
  const json a = {{"model", "stories260K"}, {"prompt", "Tell me a story about a cat and a dog."}, {"max_tokens", 8}};
  const json b = {{"model", "stories260K"},
                  {"prompt", "Where do birds go in the winter, when it is cold and snowy outside?"},
                  {"max_tokens", 8}};
  const json first = post(*server, "/v1/completions", a);
  EXPECT_EQ(cached(post(*server, "/v1/completions", b)), 0);
  const json again = post(*server, "/v1/completions", a);
  EXPECT_EQ(cached(again), again["usage"]["prompt_tokens"].get<int>() - 1);
}

// A request cut short (its client went away), then one that failed (past
// the context): the slot still answers the next as an empty one would,
// from the prefix it kept.
TEST_F(ServePrefixReuse, ARequestThatWasCutOrFailedLeavesASlotThatAnswersAsAnEmptyOne) {
  auto server = start(1, serve::SlotReuse::prefix);
  auto cold = start(1, serve::SlotReuse::none);
  const std::string prompt = "Once upon a time, there was a big red ball.";
  auto cut = send(*server, "/v1/completions",
                  {{"model", "stories260K"}, {"prompt", prompt}, {"max_tokens", 200}, {"stream", true}});
  cut->go_after(2);
  cut->wait();
  std::string past_context;
  for (int i = 0; i < model_.config().seq_len; ++i) past_context += " a";
  EXPECT_EQ(
      send(*server, "/v1/completions", {{"model", "stories260K"}, {"prompt", prompt + past_context}})->wait().status,
      400);
  const json body = {{"model", "stories260K"},
                     {"prompt", prompt + " It"},
                     {"max_tokens", 12},
                     {"temperature", 0},
                     {"logprobs", 2},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  const auto events = streamed(*server, body);
  const auto expected = streamed(*cold, body);
  ASSERT_GE(events.size(), 3u);
  const json usage = json::parse(events[events.size() - 2].substr(6))["usage"];
  EXPECT_GT(usage["prompt_tokens_details"]["cached_tokens"].get<int>(), 8);
  ASSERT_EQ(events.size(), expected.size());
  for (std::size_t i = 0; i + 2 < events.size(); ++i) {
    EXPECT_EQ(json::parse(events[i].substr(6))["choices"], json::parse(expected[i].substr(6))["choices"]);
  }
}

// A pool with room for two blocks: a conversation that does not share the
// first's prefix (which holds one block) goes to the empty slot, and as it
// may need two blocks it takes the idle slot's room (its tokens are
// dropped); it answers as an empty slot.
TEST_F(ServePrefixReuse, ASpentPoolEmptiesTheIdleSlotARequestNeedsTheRoomOf) {
  const std::uint64_t block = KvCache::kBlockPositions * kv_position_bytes(model_.config(), KvType::f32);
  auto kv_pool = std::make_shared<KvPool>(2 * block);
  auto server = start(2, serve::SlotReuse::prefix, false, kv_pool);
  auto cold = start(1, serve::SlotReuse::none);
  const json a = {{"model", "stories260K"}, {"prompt", "Tell me a story about a cat and a dog."}, {"max_tokens", 8}};
  const json b = {{"model", "stories260K"},
                  {"prompt", "Where do birds go in the winter, when it is cold?"},
                  {"max_tokens", 20},
                  {"temperature", 0}};
  post(*server, "/v1/completions", a);
  EXPECT_EQ(kv_pool->used_bytes(), block);
  const json second = post(*server, "/v1/completions", b);
  EXPECT_EQ(second["choices"], post(*cold, "/v1/completions", b)["choices"]);
  EXPECT_EQ(kv_pool->used_bytes(), 2 * block) << "the first slot gave its block back";
  server->metrics.set_kv_pool_source([&] { return serve::Metrics::KvPoolCounts{kv_pool->used_bytes(), 2 * block}; });
  const std::string metrics = server->metrics.prometheus_text();
  EXPECT_NE(metrics.find("accord_kv_pool_bytes " + std::to_string(2 * block) + "\n"), std::string::npos) << metrics;
  EXPECT_EQ(cached(post(*server, "/v1/completions", a)), 0) << "the first conversation's tokens were dropped";
}

TEST_F(ServePrefixReuse, SlotsOfThreeRanksAnswerAsAnEmptySingleRankSlot) {
  auto server = start(2, serve::SlotReuse::prefix, /*ranks=*/true);
  auto cold = start(1, serve::SlotReuse::none);
  const json first = post(*server, kChat, chat({{"user", "Tell me a story."}}));
  EXPECT_EQ(first["choices"], post(*cold, kChat, chat({{"user", "Tell me a story."}}))["choices"]);
  const std::string answer = first["choices"][0]["message"]["content"];
  const json body = chat({{"user", "Tell me a story."}, {"assistant", answer}, {"user", "And then?"}});
  const json second = post(*server, kChat, body);
  EXPECT_GT(cached(second), 8);
  EXPECT_EQ(second["choices"], post(*cold, kChat, body)["choices"]);
}

}  // namespace
}  // namespace accord
