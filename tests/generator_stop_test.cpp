// The generator encodes prompts as llama.cpp does (BOS as the vocabulary
// says, special tokens parsed) and stops on every end-of-generation token
// of the vocabulary, not only EOS: here on a scripted target over Qwen2's
// and Llama 3's vocabularies (../shared/vocab).
#include <gtest/gtest.h>

#include "runtime/generate/generator.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

// A target whose every step's logits make the next scripted token the
// argmax; it records the prompt it was given.
class ScriptedTarget final : public GenerationTarget {
 public:
  ScriptedTarget(int vocab_size, std::vector<int> script) : script_(std::move(script)) {
    config_.vocab_size = vocab_size;
    config_.seq_len = 256;
    logits_.assign(static_cast<std::size_t>(vocab_size), 0.0f);
  }

  const std::vector<int>& prefilled() const { return prefilled_; }

  const ModelConfig& config() const override { return config_; }
  int position() const override { return position_; }
  std::span<const int> tokens() const override { return {}; }  // generation here starts empty
  Status truncate(int) override { return Error(ErrorCode::contract, "a scripted target does not move back"); }
  Result<std::span<const float>> forward(std::span<const int> tokens) override { return prefill(tokens); }
  Result<std::span<const float>> prefill(std::span<const int> tokens) override {
    prefilled_.assign(tokens.begin(), tokens.end());
    position_ += static_cast<int>(tokens.size());
    return next_logits();
  }
  Result<std::span<const float>> decode(int) override {
    ++position_;
    return next_logits();
  }
  Result<DraftVerdict> decode_draft(int, std::span<const int>) override {
    return Error(ErrorCode::contract, "no drafts here");
  }
  Status load_prompt_cache(const std::filesystem::path&, const PromptCacheDescriptor&, std::span<const int>) override {
    return Error(ErrorCode::contract, "no prompt cache here");
  }
  Status save_prompt_cache(const std::filesystem::path&, const PromptCacheDescriptor&, std::span<const int>) override {
    return Error(ErrorCode::contract, "no prompt cache here");
  }

 private:
  std::span<const float> next_logits() {
    std::fill(logits_.begin(), logits_.end(), 0.0f);
    logits_.at(static_cast<std::size_t>(script_.at(step_++))) = 1.0f;
    return logits_;
  }

  ModelConfig config_;
  std::vector<int> script_;
  std::vector<float> logits_;
  std::vector<int> prefilled_;
  std::size_t step_ = 0;
  int position_ = 0;
};

using test::id_of;
using test::load_vocab;

GenerationResult generate_script(const Tokenizer& tokenizer, ScriptedTarget& target, const std::string& prompt) {
  GenerationOptions options;
  options.max_tokens = 8;
  options.sampler.temperature = 0.0f;
  auto outcome = generate(target, tokenizer, prompt, options);
  EXPECT_TRUE(outcome) << outcome.error().error.message();
  return outcome ? *outcome : GenerationResult{};
}

// Qwen2's chat turn ends with <|im_end|>, which is not its EOS.
TEST(GeneratorStop, StopsOnAnEndOfTurnTokenThatIsNotEos) {
  const Tokenizer qwen = load_vocab("qwen2");
  const int im_end = id_of(qwen, "<|im_end|>");
  ASSERT_NE(im_end, qwen.eos_id());
  const std::vector<int> hi = qwen.encode("Hi", false, false).value();
  ScriptedTarget target(qwen.vocab_size(), {hi[0], im_end, hi[0]});
  const GenerationResult result = generate_script(qwen, target, "<|im_start|>user\nHello<|im_end|>");
  EXPECT_EQ(result.generated_tokens, std::vector<int>{hi[0]});
  EXPECT_EQ(result.stop_reason, StopReason::end_of_sequence);
  // no BOS (the file adds none); the chat tokens are parsed
  std::vector<int> prompt = {id_of(qwen, "<|im_start|>")};
  const std::vector<int> body = qwen.encode("user\nHello", false, false).value();
  prompt.insert(prompt.end(), body.begin(), body.end());
  prompt.push_back(im_end);
  EXPECT_EQ(target.prefilled(), prompt);
  EXPECT_EQ(result.text, "<|im_start|>user\nHello<|im_end|>Hi");
}

// Llama 3 adds its BOS and stops on <|eot_id|>.
TEST(GeneratorStop, Llama3AddsBosAndStopsOnEotId) {
  const Tokenizer llama = load_vocab("llama-bpe");
  const std::vector<int> word = llama.encode(" world", false, false).value();
  ScriptedTarget target(llama.vocab_size(), {word[0], id_of(llama, "<|eot_id|>")});
  const GenerationResult result = generate_script(llama, target, "Hello");
  EXPECT_EQ(target.prefilled().front(), llama.bos_id());
  EXPECT_EQ(result.generated_tokens, std::vector<int>{word[0]});
  EXPECT_EQ(result.stop_reason, StopReason::end_of_sequence);
  EXPECT_EQ(result.text, "Hello world");
}

}  // namespace
}  // namespace accord
