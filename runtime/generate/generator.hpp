// Text generation on top of a forward pass: tokenize, prefill the prompt as
// one batch, then sample and decode one token at a time, streaming pieces.
//
// Counting follows llama2.c: the prompt (BOS included) is prefilled, the
// first token is sampled from the prefill's logits, and every further token
// costs one decode step. Generation stops after max_tokens tokens, when the
// model samples BOS or EOS (not emitted), or when the context is full.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/model/sampler.hpp"
#include "runtime/model/tokenizer.hpp"
#include "runtime/model/transformer.hpp"

namespace accord {

struct GenerationOptions {
  int max_tokens = 256;  // >= 1
  SamplerOptions sampler;
};

enum class StopReason { max_tokens, end_of_sequence, context_full };
std::string_view to_string(StopReason reason);

struct GenerationResult {
  std::vector<int> prompt_tokens;     // BOS included
  std::vector<int> generated_tokens;  // sampled ids, prompt excluded
  std::string text;                   // prompt and generated pieces as run.c prints them
  StopReason stop_reason = StopReason::max_tokens;
  double prefill_seconds = 0;  // forward of the whole prompt
  double decode_seconds = 0;   // every later forward step together
  int decode_steps = 0;

  double prefill_tokens_per_second() const;
  double decode_tokens_per_second() const;
};

// Receives each printable piece as soon as it is known, prompt pieces first.
using PieceSink = std::function<void(std::string_view piece)>;

// Fails before any forward step when the options are invalid, the prompt
// cannot be encoded or does not fit the context.
Result<GenerationResult> generate(Transformer& transformer, const Tokenizer& tokenizer, std::string_view prompt,
                                  const GenerationOptions& options, const PieceSink& sink = {});

}  // namespace accord
