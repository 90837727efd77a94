// The golden tests: stories260K against llama2.c's run.c, and the
// determinism guarantees of the forward pass (docs/invariants.md,
// invariant 1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/generate/generator.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/synthetic.hpp"
#include "runtime/model/transformer.hpp"
#include "runtime/text/synthetic_tokenizer.hpp"
#include "tests/reference.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

TEST(Golden, GreedyGenerationMatchesRunC) {
  const Model model = test::load_stories_model();
  const Tokenizer tokenizer = test::load_stories_tokenizer();
  cpu::ThreadPool pool(2);
  Session session(model, pool);
  const auto cases = test::greedy_cases();
  ASSERT_EQ(cases.size(), 3u);
  for (const auto& c : cases) {
    ASSERT_TRUE(session.reset());
    GenerationOptions options;
    options.max_tokens = static_cast<int>(c.generated_tokens.size());
    options.sampler.temperature = 0.0f;
    std::string streamed;
    auto result = generate(session, tokenizer, c.prompt, options, [&](std::string_view p) { streamed += p; });
    ASSERT_TRUE(result) << result.error().message();
    EXPECT_EQ(result->prompt_tokens, c.prompt_tokens) << c.prompt;
    EXPECT_EQ(result->generated_tokens, c.generated_tokens) << c.prompt;
    EXPECT_EQ(result->text, c.text) << c.prompt;
    EXPECT_EQ(streamed, c.text) << c.prompt;
    EXPECT_EQ(result->stop_reason, StopReason::max_tokens);
  }
}

TEST(Golden, FirstLogitsOfBosMatchRunC) {
  const Model model = test::load_stories_model();
  const auto reference = test::first_logits();
  ASSERT_EQ(reference.first8.size(), 8u);
  cpu::ThreadPool pool(1);
  Transformer transformer(model, pool);
  KvCache kv(model.config(), 0, model.config().n_layers);
  const int bos = reference.input_token;
  auto logits = transformer.forward(std::span<const int>(&bos, 1), 0, kv);
  ASSERT_TRUE(logits);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR((*logits)[i], reference.first8[i], 1e-5) << "logit " << i;
  EXPECT_EQ(argmax(*logits), reference.argmax);
  EXPECT_NEAR((*logits)[reference.argmax], reference.argmax_logit, 1e-5);
}

// Every logit of a prefill followed by decode steps, bit for bit.
std::vector<float> trace(const Model& model, int threads, bool prefill_as_batch) {
  cpu::ThreadPool pool(threads);
  Transformer transformer(model, pool);
  KvCache kv(model.config(), 0, model.config().n_layers);
  const std::vector<int> prompt = {1, 17, 42, 99, 3, 250, 7, 120};
  std::vector<float> all;
  auto append = [&](std::span<const float> logits) { all.insert(all.end(), logits.begin(), logits.end()); };
  int pos = 0;
  if (prefill_as_batch) {
    append(*transformer.forward(prompt, 0, kv));
    pos = static_cast<int>(prompt.size());
  } else {
    for (int token : prompt) {
      auto logits = transformer.forward(std::span<const int>(&token, 1), pos++, kv);
      if (pos == static_cast<int>(prompt.size())) append(*logits);
    }
  }
  for (int step = 0; step < 12; ++step) {
    const int next = argmax(std::span<const float>(all).last(static_cast<std::size_t>(model.config().vocab_size)));
    append(*transformer.forward(std::span<const int>(&next, 1), pos++, kv));
  }
  return all;
}

TEST(Golden, LogitsAreBitIdenticalForOneAndTwoThreads) {
  const Model stories = test::load_stories_model();
  EXPECT_TRUE(test::bit_identical(trace(stories, 1, true), trace(stories, 2, true)));
  test::TempDir dir;
  ModelConfig wide = test::small_config();
  wide.dim = 256;
  wide.hidden_dim = 680;
  wide.n_heads = 8;
  const Model synthetic = test::synthetic_model(dir, {wide, 3, llama2c::Layout::legacy});
  const auto one = trace(synthetic, 1, true);
  EXPECT_TRUE(test::bit_identical(one, trace(synthetic, 2, true)));
  EXPECT_TRUE(test::bit_identical(one, trace(synthetic, 3, true)));
}

TEST(Golden, BatchedPrefillEqualsTokenByToken) {
  const Model stories = test::load_stories_model();
  EXPECT_TRUE(test::bit_identical(trace(stories, 2, true), trace(stories, 2, false)));
}

TEST(Golden, SampledGenerationIsReproducible) {
  const Model model = test::load_stories_model();
  const Tokenizer tokenizer = test::load_stories_tokenizer();
  auto run = [&](int threads, std::uint64_t seed) {
    cpu::ThreadPool pool(threads);
    Session session(model, pool);
    GenerationOptions options;
    options.max_tokens = 40;
    options.sampler = {0.9f, 0.9f, seed};
    return generate(session, tokenizer, "Once upon a time", options)->generated_tokens;
  };
  const auto first = run(1, 42);
  EXPECT_EQ(first, run(2, 42));
  EXPECT_NE(first, run(1, 43));
}

TEST(Golden, ForwardRefusesBadInputWithoutTouchingTheCache) {
  const Model model = test::load_stories_model();
  cpu::ThreadPool pool(1);
  Transformer transformer(model, pool);
  KvCache kv(model.config(), 0, model.config().n_layers);
  const auto contents = [&kv] { return test::kv_rows(kv, 0, 0, kv.capacity()); };
  const std::vector<float> before = contents();
  const std::vector<int> bad_id = {1, 512};
  auto r1 = transformer.forward(bad_id, 0, kv);
  ASSERT_FALSE(r1);
  EXPECT_EQ(r1.error().code(), ErrorCode::contract);
  EXPECT_NE(r1.error().message().find("token id 512"), std::string::npos);
  const std::vector<int> negative = {-1};
  EXPECT_FALSE(transformer.forward(negative, 0, kv));
  const std::vector<int> one = {1};
  auto r2 = transformer.forward(one, 512, kv);
  ASSERT_FALSE(r2);
  EXPECT_NE(r2.error().message().find("context of 512"), std::string::npos);
  EXPECT_FALSE(transformer.forward(std::vector<int>{}, 0, kv));
  EXPECT_EQ(before, contents());
  EXPECT_EQ(kv.held_bytes(), 0u) << "a refused step takes no room";
}

TEST(Golden, GenerationStopsAtTheEndOfTheContext) {
  test::TempDir dir;
  ModelConfig c = test::small_config();
  c.vocab_size = kMinSyntheticVocab;
  c.seq_len = 8;
  const Model model = test::synthetic_model(dir, {c, 4, llama2c::Layout::legacy});
  auto tokenizer = synthetic_tokenizer(c.vocab_size);
  ASSERT_TRUE(tokenizer);
  cpu::ThreadPool pool(1);
  Session session(model, pool);
  GenerationOptions options;
  options.max_tokens = 100;
  options.sampler = {1.0f, 1.0f, 2};
  auto result = generate(session, *tokenizer, "ab", options);
  ASSERT_TRUE(result) << result.error().message();
  // Positions 0..seq_len-1 are all used; the last sampled token needs none.
  EXPECT_EQ(result->stop_reason, StopReason::context_full);
  EXPECT_EQ(result->prompt_tokens.size() + result->generated_tokens.size(), static_cast<std::size_t>(c.seq_len + 1));
  ASSERT_TRUE(session.reset());
  auto too_long = generate(session, *tokenizer, "a prompt far longer than eight tokens", options);
  ASSERT_FALSE(too_long);
  EXPECT_NE(too_long.error().message().find("past the model's context"), std::string::npos);
}

}  // namespace
}  // namespace accord
