// Text generation on top of a session: tokenize, prefill the prompt as one
// transaction (reusing a prompt cache when one fits), then sample and decode
// one token at a time, streaming pieces.
//
// Counting follows llama2.c: the prompt (BOS included when the vocabulary
// adds it; special tokens written in it parsed, as llama.cpp does) is
// prefilled, the first token is sampled from the prefill's logits, and
// every further token costs one decode step. Generation stops after
// max_tokens tokens, when the model samples BOS or a token that ends
// generation (EOS, <|eot_id|>, <|im_end|>, ...: Tokenizer::
// end_of_generation; not emitted), or when the context is full.
//
// Speculative decoding (options.drafter): a drafter guesses up to
// draft_tokens tokens after each generated one, and one prediction-target
// step of the target verifies them all, keeping the longest prefix that
// greedy decoding would produce and greedy's token after it. The tokens are
// exactly plain greedy decoding's; only the number of steps changes. It
// needs temperature 0.
//
// A step that aborts (the target's state is as it was before it) is run
// again, up to `retries` times per step, and continues exactly where it
// stopped. A step that poisons the session (a rank was lost) is run again
// once the target healed (GenerationTarget::heal: the lost ranks started
// afresh, the committed tokens replayed), up to `heal_attempts` heals over
// the whole generation; a speculative step's poison is healed so as well,
// within its retries. A step refused before it changed anything, a poison
// that could not be healed, or a step that still fails after its retries
// ends generation with the error (docs/healing.md).
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/generate/drafter.hpp"
#include "runtime/generate/logprobs.hpp"
#include "runtime/generate/target.hpp"
#include "runtime/text/sampler.hpp"
#include "runtime/text/tokenizer.hpp"

namespace accord {

struct GenerationOptions {
  int max_tokens = 256;  // >= 1
  SamplerOptions sampler;
  // A prompt cache root: reused when it holds a prefix of the prompt for
  // this model, written otherwise. Empty: no cache.
  std::filesystem::path prompt_cache;
  // Whether the target may hold tokens already (a serve slot's last
  // request): generation then moves it back to the longest prefix they
  // share with the prompt, short of the prompt's last token, and prefills
  // only the rest, as after a prompt cache's prefix. The tokens are those
  // of an empty target: a token's rows do not depend on the step that
  // computed them. A held prefix wins over the prompt cache, which is
  // looked at only when none is kept. With prompt_logprobs the target
  // moves back to empty (every row's logits are needed). false: the
  // target must be empty.
  bool reuse_held_prefix = false;
  int retries = 2;             // >= 0: how often one aborted step is run again
  Drafter* drafter = nullptr;  // speculative decoding with it (not owned), or none
  int draft_tokens = 4;        // >= 1: the most tokens one speculative step verifies
  int heal_attempts = 3;       // >= 0: attempts to heal a poisoned session, over the whole generation
  // The wait after a heal attempt that failed, doubled after each: time for
  // a lost node to come back.
  std::chrono::milliseconds heal_backoff{500};
  // Whether the prompt's pieces go to the sink before the generated ones
  // (they are in GenerationResult::text either way).
  bool emit_prompt = true;
  // Asked after each step's tokens were emitted: true ends generation
  // there, with stop reason `stopped` (a service's stop string, or a client
  // that went away). Empty: never.
  std::function<bool()> stop_requested;
  // Called once the prompt's prefill committed, before the first generated
  // token is kept: the target then holds exactly the prompt's tokens (a
  // serve slot snapshots them for later requests). Empty: nothing.
  std::function<void()> on_prefilled;
  // Log-probabilities (logprobs.hpp) of each generated token, with the
  // top_logprobs likeliest tokens of its step (0 to kMaxTopLogprobs); none
  // when negative. The step then returns its logits to the generator, which
  // samples them as the target would have: the tokens do not change. Not
  // with a drafter.
  int top_logprobs = -1;
  // With top_logprobs: those of the prompt's tokens after BOS too. The
  // prompt is then run in forward steps that return every row's logits, at
  // most prompt_logprob_floats of them a step (so that memory stays
  // bounded), and no prompt cache is read or written.
  bool prompt_logprobs = false;
  std::size_t prompt_logprob_floats = std::size_t{1} << 22;  // 16 MiB
  // Receives each token's log-probabilities as soon as they are known: the
  // prompt's (prompt: true) during the prefill, then each generated
  // token's before its piece goes to the PieceSink.
  std::function<void(const TokenLogprobs&, bool prompt)> on_logprobs;
};

// stopped: options.stop_requested said so. error: generation ended with an
// error (a GenerationFailure's partial result).
enum class StopReason { max_tokens, end_of_sequence, context_full, stopped, error };
std::string_view to_string(StopReason reason);

// What happened with the prompt cache.
enum class PromptCacheOutcome {
  unused,    // no cache was asked for, or the prompt is too short to cache
  hit,       // a cached prefix was loaded; only the rest was prefilled
  saved,     // no usable prefix was there; the prompt's prefix was saved on every rank
  rejected,  // a cache was there but failed validation: cold prefill, not overwritten
  failed,    // a save was tried and did not publish on every rank; nothing of it is visible
};
std::string_view to_string(PromptCacheOutcome outcome);

// The descriptor under which `accord generate` saves and loads prefixes.
PromptCacheDescriptor generation_cache_descriptor();

struct GenerationResult {
  std::vector<int> prompt_tokens;     // BOS included
  std::vector<int> generated_tokens;  // sampled ids, prompt excluded
  std::string text;                   // prompt and generated pieces as run.c prints them
  StopReason stop_reason = StopReason::max_tokens;
  double prefill_seconds = 0;  // loading the cache (if any) and the forward of the rest
  double decode_seconds = 0;   // every later forward step together
  int decode_steps = 0;
  int drafted_tokens = 0;   // speculative decoding: tokens the drafter proposed
  int accepted_tokens = 0;  // and those the target kept
  PromptCacheOutcome prompt_cache = PromptCacheOutcome::unused;
  std::string prompt_cache_reason;    // why it was rejected, or why the save failed
  std::string prompt_cache_recovery;  // what opening the cache healed (prompt_cache_recovery.hpp), if anything
  int prompt_cache_tokens_reused = 0;
  int held_tokens_reused = 0;  // prompt tokens the target held (reuse_held_prefix)
  int aborted_steps = 0;       // failed attempts of steps that aborted, retried or not
  int retries = 0;             // attempts made again after an abort
  int recoveries = 0;          // speculative steps whose poisoned target recovered before a retry
  int heals = 0;               // poisoned steps run again after the target healed
  int heal_attempts = 0;       // heals tried, successful or not
  double heal_seconds = 0;     // spent healing, replay included
  int replayed_tokens = 0;     // committed tokens prefilled again by the heals
  bool poisoned = false;       // generation ended because the session is poisoned
  std::string poison_cause;
  // With options.top_logprobs: one per prompt token after BOS (with
  // prompt_logprobs), and one per generated token.
  std::vector<TokenLogprobs> prompt_logprobs;
  std::vector<TokenLogprobs> generated_logprobs;

  // The prompt tokens not prefilled: held, or loaded from the prompt cache.
  int cached_prompt_tokens() const { return held_tokens_reused + prompt_cache_tokens_reused; }
  double prefill_tokens_per_second() const;
  // Tokens the decode steps produced: one each, and the draft tokens kept.
  int decoded_tokens() const { return decode_steps + accepted_tokens; }
  double decode_tokens_per_second() const;
  double acceptance_rate() const;  // accepted / drafted; 0 when nothing was drafted
};

// Generation that ended with an error, and what it had done by then (the
// tokens and text so far, stop reason `error`, the aborted steps, retries
// and poison), so a report can say both. An error whose session is
// poisoned says "the session is poisoned: " and the cause.
struct GenerationFailure {
  Error error;
  GenerationResult partial;

  const std::string& message() const { return error.message(); }
};

// What generate returns: the result, or the failure with the partial result.
using GenerationOutcome = Result<GenerationResult, GenerationFailure>;

// Receives each printable piece as soon as it is known, prompt pieces first.
using PieceSink = std::function<void(std::string_view piece)>;
// Receives warnings (a rejected, recovered or unsaved prompt cache).
using WarningSink = std::function<void(const std::string& warning)>;

// The prompt's tokens as generation encodes them: as llama.cpp does (BOS
// and EOS as the vocabulary says, special tokens written in it parsed).
Result<std::vector<int>> encode_prompt(const Tokenizer& tokenizer, std::string_view prompt);

// How many tokens of `prompt` a target that holds `held` keeps with
// GenerationOptions::reuse_held_prefix: the prefix they share, short of
// the prompt's last token.
int reusable_prefix_length(std::span<const int> held, std::span<const int> prompt);

// Generates from the target's current state, which must be empty unless
// options.reuse_held_prefix. Fails
// before any forward step when the options are invalid or the prompt cannot
// be encoded or does not fit the context.
GenerationOutcome generate(GenerationTarget& target, const Tokenizer& tokenizer, std::string_view prompt,
                           const GenerationOptions& options, const PieceSink& sink = {}, const WarningSink& warn = {});

// The same on a single-rank session.
inline GenerationOutcome generate(Session& session, const Tokenizer& tokenizer, std::string_view prompt,
                                  const GenerationOptions& options, const PieceSink& sink = {},
                                  const WarningSink& warn = {}) {
  SessionTarget target(session);
  return generate(target, tokenizer, prompt, options, sink, warn);
}

}  // namespace accord
