#include "runtime/generate/generator.hpp"

#include <chrono>

#include "runtime/io/digest.hpp"

namespace accord {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Status check_request(const GenerationTarget& target, const Tokenizer& tokenizer, const GenerationOptions& options) {
  if (options.max_tokens < 1) {
    return Error(ErrorCode::contract, "max tokens must be at least 1, got " + std::to_string(options.max_tokens));
  }
  if (Status ok = validate(options.sampler); !ok) return ok;
  const ModelConfig& config = target.config();
  if (tokenizer.vocab_size() != config.vocab_size) {
    return Error(ErrorCode::architecture, "the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                                              " tokens but the model's vocabulary has " +
                                              std::to_string(config.vocab_size));
  }
  if (target.position() != 0) return Error(ErrorCode::state, "generation needs an empty session");
  return {};
}

// Loads the cached prefix when it is one of the prompt's, and says how many
// tokens it covers. A cache that exists but fails validation is reported as
// rejected and left alone.
struct CacheUse {
  PromptCacheOutcome outcome = PromptCacheOutcome::unused;
  std::string reason;
  int reused = 0;
};

CacheUse try_prompt_cache(GenerationTarget& target, const std::filesystem::path& root, std::span<const int> prompt) {
  // The last prompt token is always run: its logits pick the first token.
  const auto cacheable = prompt.first(prompt.size() - 1);
  auto live = read_live_generation(root, 0);
  if (!live) {
    if (!std::filesystem::exists(rank_folder(root, 0) / "CURRENT")) return {PromptCacheOutcome::saved, "", 0};
    return {PromptCacheOutcome::rejected, live.error().message(), 0};
  }
  const int n = live->manifest.prefix_token_count;
  const bool is_prefix = n >= 1 && n <= static_cast<int>(cacheable.size()) &&
                         live->manifest.prefix_sha256 == token_ids_sha256(cacheable.first(static_cast<std::size_t>(n)));
  if (!is_prefix) return {PromptCacheOutcome::saved, "", 0};  // another prompt's prefix: replace it
  Status loaded =
      target.load_prompt_cache(root, generation_cache_descriptor(), cacheable.first(static_cast<std::size_t>(n)));
  if (!loaded) return {PromptCacheOutcome::rejected, loaded.error().message(), 0};
  return {PromptCacheOutcome::hit, "", n};
}

}  // namespace

std::string_view to_string(StopReason reason) {
  switch (reason) {
    case StopReason::max_tokens:
      return "max_tokens";
    case StopReason::end_of_sequence:
      return "end_of_sequence";
    case StopReason::context_full:
      return "context_full";
  }
  return "unknown";
}

std::string_view to_string(PromptCacheOutcome outcome) {
  switch (outcome) {
    case PromptCacheOutcome::unused:
      return "unused";
    case PromptCacheOutcome::hit:
      return "hit";
    case PromptCacheOutcome::saved:
      return "saved";
    case PromptCacheOutcome::rejected:
      return "rejected";
  }
  return "unknown";
}

PromptCacheDescriptor generation_cache_descriptor() { return {"prompt-prefix", "accord-generate"}; }

double GenerationResult::prefill_tokens_per_second() const {
  return prefill_seconds > 0 ? static_cast<double>(prompt_tokens.size()) / prefill_seconds : 0.0;
}

double GenerationResult::decode_tokens_per_second() const {
  return decode_seconds > 0 ? decode_steps / decode_seconds : 0.0;
}

Result<GenerationResult> generate(GenerationTarget& target, const Tokenizer& tokenizer, std::string_view prompt,
                                  const GenerationOptions& options, const PieceSink& sink, const WarningSink& warn) {
  if (Status ok = check_request(target, tokenizer, options); !ok) return ok.error();
  auto encoded = tokenizer.encode(prompt, /*bos=*/true, /*eos=*/false);
  if (!encoded) return encoded.error();

  GenerationResult result;
  result.prompt_tokens = std::move(*encoded);
  const int prompt_length = static_cast<int>(result.prompt_tokens.size());
  const int context = target.config().seq_len;
  if (prompt_length > context) {
    return Error(ErrorCode::contract, "the prompt is " + std::to_string(prompt_length) +
                                          " tokens long, past the model's context of " + std::to_string(context) +
                                          " tokens");
  }

  auto emit = [&](int previous, int token) {
    const std::string piece = tokenizer.decode(previous, token);
    result.text += piece;
    if (sink && !piece.empty()) sink(piece);
  };
  for (int i = 1; i < prompt_length; ++i) emit(result.prompt_tokens[i - 1], result.prompt_tokens[i]);

  const std::span<const int> prompt_ids(result.prompt_tokens);
  const auto prefill_start = Clock::now();
  if (!options.prompt_cache.empty() && prompt_length >= 2) {
    CacheUse use = try_prompt_cache(target, options.prompt_cache, prompt_ids);
    result.prompt_cache = use.outcome;
    result.prompt_cache_reason = use.reason;
    result.prompt_cache_tokens_reused = use.reused;
    if (use.outcome == PromptCacheOutcome::rejected && warn) {
      warn("prompt cache rejected, prefilling from scratch: " + use.reason);
    }
  }
  // The generator's stop rule: sampling BOS or EOS ends generation.
  const std::vector<int> stop_tokens = {tokenizer.bos_id(), tokenizer.eos_id()};
  Sampler sampler(options.sampler);
  auto sampled = target.prefill_and_sample(
      prompt_ids.subspan(static_cast<std::size_t>(result.prompt_cache_tokens_reused)), sampler, stop_tokens);
  if (!sampled) return sampled.error();
  result.prefill_seconds = seconds_since(prefill_start);
  if (result.prompt_cache == PromptCacheOutcome::saved) {
    Status saved = target.save_prompt_cache(options.prompt_cache, generation_cache_descriptor(),
                                            prompt_ids.first(prompt_ids.size() - 1));
    if (!saved) {
      result.prompt_cache = PromptCacheOutcome::rejected;
      result.prompt_cache_reason = saved.error().message();
      if (warn) warn("could not save the prompt cache: " + saved.error().message());
    }
  }

  int previous = result.prompt_tokens.back();
  const auto decode_start = Clock::now();
  for (;;) {
    if (sampled->stop) {
      result.stop_reason = StopReason::end_of_sequence;
      break;
    }
    const int next = sampled->token;
    result.generated_tokens.push_back(next);
    emit(previous, next);
    if (static_cast<int>(result.generated_tokens.size()) >= options.max_tokens) break;
    if (target.position() >= context) {
      result.stop_reason = StopReason::context_full;
      break;
    }
    sampled = target.decode_and_sample(next, sampler, stop_tokens);
    if (!sampled) return sampled.error();
    ++result.decode_steps;
    previous = next;
  }
  result.decode_seconds = seconds_since(decode_start);
  return result;
}

}  // namespace accord
