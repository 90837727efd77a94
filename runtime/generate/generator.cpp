#include "runtime/generate/generator.hpp"

#include <chrono>

#include "runtime/model/kv_cache.hpp"

namespace accord {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
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

double GenerationResult::prefill_tokens_per_second() const {
  return prefill_seconds > 0 ? static_cast<double>(prompt_tokens.size()) / prefill_seconds : 0.0;
}

double GenerationResult::decode_tokens_per_second() const {
  return decode_seconds > 0 ? decode_steps / decode_seconds : 0.0;
}

Result<GenerationResult> generate(Transformer& transformer, const Tokenizer& tokenizer, std::string_view prompt,
                                  const GenerationOptions& options, const PieceSink& sink) {
  if (options.max_tokens < 1) {
    return Error(ErrorCode::contract, "max tokens must be at least 1, got " + std::to_string(options.max_tokens));
  }
  if (Status ok = validate(options.sampler); !ok) return ok.error();
  const ModelConfig& config = transformer.model().config();
  if (tokenizer.vocab_size() != config.vocab_size) {
    return Error(ErrorCode::architecture, "the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                                              " tokens but the model's vocabulary has " +
                                              std::to_string(config.vocab_size));
  }
  auto encoded = tokenizer.encode(prompt, /*bos=*/true, /*eos=*/false);
  if (!encoded) return encoded.error();

  GenerationResult result;
  result.prompt_tokens = std::move(*encoded);
  const int prompt_length = static_cast<int>(result.prompt_tokens.size());
  if (prompt_length > config.seq_len) {
    return Error(ErrorCode::contract, "the prompt is " + std::to_string(prompt_length) +
                                          " tokens long, past the model's context of " +
                                          std::to_string(config.seq_len) + " tokens");
  }

  auto emit = [&](int previous, int token) {
    const std::string piece = tokenizer.decode(previous, token);
    result.text += piece;
    if (sink && !piece.empty()) sink(piece);
  };
  for (int i = 1; i < prompt_length; ++i) emit(result.prompt_tokens[i - 1], result.prompt_tokens[i]);

  KvCache kv(config, 0, config.n_layers);
  Sampler sampler(options.sampler);
  const auto prefill_start = Clock::now();
  auto logits = transformer.forward(result.prompt_tokens, 0, kv);
  if (!logits) return logits.error();
  result.prefill_seconds = seconds_since(prefill_start);

  int previous = result.prompt_tokens.back();
  int pos = prompt_length;
  const auto decode_start = Clock::now();
  for (;;) {
    const int next = sampler.sample(*logits);
    if (next == tokenizer.bos_id() || next == tokenizer.eos_id()) {
      result.stop_reason = StopReason::end_of_sequence;
      break;
    }
    result.generated_tokens.push_back(next);
    emit(previous, next);
    if (static_cast<int>(result.generated_tokens.size()) >= options.max_tokens) break;
    if (pos >= config.seq_len) {
      result.stop_reason = StopReason::context_full;
      break;
    }
    const int step_input = next;
    logits = transformer.forward(std::span<const int>(&step_input, 1), pos, kv);
    if (!logits) return logits.error();
    ++result.decode_steps;
    previous = next;
    ++pos;
  }
  result.decode_seconds = seconds_since(decode_start);
  return result;
}

}  // namespace accord
