#include "runtime/generate/generator.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "runtime/io/digest.hpp"
#include "runtime/rank/prompt_cache.hpp"

namespace accord {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

Status check_request(const GenerationTarget& target, const Tokenizer& tokenizer, const GenerationOptions& options) {
  if (options.max_tokens < 1) {
    return Error(ErrorCode::contract, "max tokens must be at least 1, got " + std::to_string(options.max_tokens));
  }
  if (options.retries < 0) {
    return Error(ErrorCode::contract, "retries must be at least 0, got " + std::to_string(options.retries));
  }
  if (options.heal_attempts < 0) {
    return Error(ErrorCode::contract, "heal attempts must be at least 0, got " + std::to_string(options.heal_attempts));
  }
  if (Status ok = validate(options.sampler); !ok) return ok;
  if (options.top_logprobs < -1 || options.top_logprobs > kMaxTopLogprobs) {
    return Error(ErrorCode::contract, "top log-probabilities must be 0 to " + std::to_string(kMaxTopLogprobs) +
                                          ", got " + std::to_string(options.top_logprobs));
  }
  if (options.prompt_logprobs && options.top_logprobs < 0) {
    return Error(ErrorCode::contract, "the prompt's log-probabilities come with the generated tokens'");
  }
  if (options.drafter != nullptr) {
    if (options.top_logprobs >= 0) {
      return Error(ErrorCode::contract, "log-probabilities need plain decoding, not speculative");
    }
    if (options.sampler.temperature != 0.0f) {
      return Error(ErrorCode::contract, "speculative decoding verifies drafts greedily: it needs temperature 0");
    }
    if (options.draft_tokens < 1) {
      return Error(ErrorCode::contract, "draft tokens must be at least 1, got " + std::to_string(options.draft_tokens));
    }
  }
  if (Status fits = tokenizer.check_fits(target.config().vocab_size); !fits) return fits;
  if (!options.reuse_held_prefix && target.position() != 0) {
    return Error(ErrorCode::state, "generation needs an empty session");
  }
  return {};
}

// How a failed step left the session: poisoned (no state can be trusted),
// aborted (every change undone, so running it again is safe), or refused
// before it changed anything.
bool is_poisoned(const Error& error) { return error.code() == ErrorCode::commit_indeterminate; }

bool is_aborted(const Error& error) { return !error.before_state_mutation() && !is_poisoned(error); }

// What the caller gets when generation ends with `error`: a poisoned
// session's error always carries its Poison and says so. The sessions set
// it; a target of another kind may not, and then its words are the cause.
GenerationFailure stopped_by(const Error& error, GenerationResult partial) {
  partial.stop_reason = StopReason::error;
  if (!is_poisoned(error)) return {error, std::move(partial)};
  const Error named = error.poison()
                          ? error
                          : Error::poisoned({error.message(), std::nullopt, error.phase(), error.epoch().value_or(0)});
  partial.poisoned = true;
  partial.poison_cause = named.poison()->cause;
  return {named, std::move(partial)};
}

// Opens the cache (healing a publication that a killed save left mixed),
// then loads the cached prefix when it is one of the prompt's, and says how
// many tokens it covers. A cache that exists but fails validation, or whose
// load aborts, is reported as rejected and left alone; only a poisoned
// session fails.
struct CacheUse {
  PromptCacheOutcome outcome = PromptCacheOutcome::unused;
  std::string reason;
  std::string recovery;
  int reused = 0;
};

// One look at the cache: the generation rank 0's CURRENT names (`current`,
// as read), loaded when it holds a prefix of the prompt.
Result<CacheUse> look_at_cache(GenerationTarget& target, const std::filesystem::path& root,
                               std::span<const int> cacheable, const Result<std::optional<std::string>>& current) {
  if (!current) return CacheUse{PromptCacheOutcome::rejected, current.error().message(), "", 0};
  if (!*current) return CacheUse{PromptCacheOutcome::saved, "", "", 0};  // no cache yet
  auto live = read_generation(root, generation_folder(rank_folder(root, 0), **current));
  if (!live) return CacheUse{PromptCacheOutcome::rejected, live.error().message(), "", 0};
  const int n = live->manifest.prefix_token_count;
  const bool is_prefix = n <= static_cast<int>(cacheable.size()) &&
                         live->manifest.prefix_sha256 == token_ids_sha256(cacheable.first(static_cast<std::size_t>(n)));
  if (!is_prefix) return CacheUse{PromptCacheOutcome::saved, "", "", 0};  // another prompt's prefix: replace it
  Status loaded =
      target.load_prompt_cache(root, generation_cache_descriptor(), cacheable.first(static_cast<std::size_t>(n)));
  if (!loaded && is_poisoned(loaded.error())) return loaded.error();
  if (!loaded) return CacheUse{PromptCacheOutcome::rejected, loaded.error().message(), "", 0};
  return CacheUse{PromptCacheOutcome::hit, "", "", n};
}

Result<CacheUse> try_prompt_cache(GenerationTarget& target, const std::filesystem::path& root,
                                  std::span<const int> prompt) {
  auto recovered = target.recover_prompt_cache(root);
  if (!recovered) return CacheUse{PromptCacheOutcome::rejected, recovered.error().message(), "", 0};
  const bool repaired = recovered->action == RecoveryAction::healed || recovered->action == RecoveryAction::cleared;
  // The last prompt token is always run: its logits pick the first token.
  const auto cacheable = prompt.first(prompt.size() - 1);
  // Readers take no lock: another writer may switch CURRENT, and remove
  // the generation just read, during a look. A refusal after which CURRENT
  // names something else is such a race, not a bad cache: look again.
  constexpr int kLooks = 3;
  for (int look = 1;; ++look) {
    const auto current = read_current(rank_folder(root, 0));
    auto use = look_at_cache(target, root, cacheable, current);
    if (!use) return use;
    const auto now = read_current(rank_folder(root, 0));
    const bool moved = current && now && *current != *now;
    if (use->outcome != PromptCacheOutcome::rejected || !moved || look == kLooks) {
      if (repaired) use->recovery = recovered->reason;
      return use;
    }
  }
}

// Generation stops on BOS (as run.c does) and on every token the
// vocabulary says ends generation (EOS, <|eot_id|>, <|im_end|>, ...).
std::vector<int> stop_tokens_of(const Tokenizer& tokenizer) {
  std::vector<int> stop = tokenizer.end_of_generation();
  if (tokenizer.bos_id() >= 0) stop.push_back(tokenizer.bos_id());
  return stop;
}

// One generation: filled in step by step into `result`, which is what the
// caller gets whether it ends well or with an error.
class Generation {
 public:
  Generation(GenerationTarget& target, const Tokenizer& tokenizer, const GenerationOptions& options,
             const PieceSink& sink, const WarningSink& warn)
      : target_(target),
        tokenizer_(tokenizer),
        options_(options),
        sink_(sink),
        warn_(warn),
        sampler_(options.sampler),
        stop_tokens_(stop_tokens_of(tokenizer)) {}

  GenerationResult& result() { return result_; }

  Status run(std::string_view prompt) {
    if (Status ok = check_request(target_, tokenizer_, options_); !ok) return ok;
    if (Status ok = encode(prompt); !ok) return ok;
    const auto prefill_start = Clock::now();
    auto first = prefill();
    if (!first) return first.error();
    result_.prefill_seconds = seconds_since(prefill_start);
    if (Status ok = save_prompt_cache(); !ok) return ok;
    if (options_.on_prefilled) options_.on_prefilled();
    const auto decode_start = Clock::now();
    Status decoded = decode_from(*first);
    result_.decode_seconds = seconds_since(decode_start);
    return decoded;
  }

 private:
  // Encodes the prompt (encode_prompt), checks that it fits and emits its
  // pieces.
  Status encode(std::string_view prompt) {
    auto encoded = encode_prompt(tokenizer_, prompt);
    if (!encoded) return encoded.error();
    if (encoded->empty()) return Error(ErrorCode::contract, "the prompt is empty and the vocabulary adds no BOS");
    result_.prompt_tokens = std::move(*encoded);
    const int prompt_length = static_cast<int>(result_.prompt_tokens.size());
    const int context = target_.config().seq_len;
    if (prompt_length > context) {
      return Error(ErrorCode::contract, "the prompt is " + std::to_string(prompt_length) +
                                            " tokens long, past the model's context of " + std::to_string(context) +
                                            " tokens");
    }
    for (int i = tokenizer_.add_bos() ? 1 : 0; i < prompt_length; ++i) {
      emit(i > 0 ? result_.prompt_tokens[i - 1] : -1, result_.prompt_tokens[i], options_.emit_prompt);
    }
    return {};
  }

  void emit(int previous, int token, bool to_sink = true) {
    const std::string piece = tokenizer_.decode(previous, token);
    result_.text += piece;
    if (to_sink && sink_ && !piece.empty()) sink_(piece);
  }

  // Loads a cached prefix when there is one, then prefills the rest and
  // samples the first token.
  Result<SampledToken> prefill() {
    const std::span<const int> prompt(result_.prompt_tokens);
    if (options_.reuse_held_prefix) {
      if (Status kept = keep_held_prefix(); !kept) return kept.error();
    }
    if (options_.prompt_logprobs) return prefill_with_logprobs(prompt);
    if (!options_.prompt_cache.empty() && prompt.size() >= 2 && result_.held_tokens_reused == 0) {
      auto use = try_prompt_cache(target_, options_.prompt_cache, prompt);
      if (!use) return use.error();
      result_.prompt_cache = use->outcome;
      result_.prompt_cache_reason = use->reason;
      result_.prompt_cache_recovery = use->recovery;
      result_.prompt_cache_tokens_reused = use->reused;
      if (!use->recovery.empty() && warn_) warn_("prompt cache recovered: " + use->recovery);
      if (use->outcome == PromptCacheOutcome::rejected && warn_) {
        warn_("prompt cache rejected, prefilling from scratch: " + use->reason);
      }
    }
    const auto rest = prompt.subspan(static_cast<std::size_t>(result_.cached_prompt_tokens()));
    return sampling_step([&] { return target_.prefill(rest); },
                         [&] { return target_.prefill_and_sample(rest, sampler_, stop_tokens_); });
  }

  // Moves the target back to the prefix of the prompt it holds (to empty
  // when every row's logits are asked for); an aborted move is tried again
  // and a poisoned one healed as a step is.
  Status keep_held_prefix() {
    const int kept = options_.prompt_logprobs ? 0 : reusable_prefix_length(target_.tokens(), result_.prompt_tokens);
    if (kept < target_.position()) {
      if (Status moved = with_retries([&] { return target_.truncate(kept); }); !moved) return moved;
    }
    result_.held_tokens_reused = kept;
    return {};
  }

  // The prompt in forward steps that return every row's logits: each row
  // gives the log-probabilities of the prompt's next token, and the last
  // row's logits are sampled for the first generated token.
  Result<SampledToken> prefill_with_logprobs(std::span<const int> prompt) {
    const auto vocab = static_cast<std::size_t>(target_.config().vocab_size);
    const std::size_t rows = std::max<std::size_t>(1, options_.prompt_logprob_floats / vocab);
    for (std::size_t first = 0;; first += rows) {
      const auto chunk = prompt.subspan(first, std::min(rows, prompt.size() - first));
      const bool last = first + chunk.size() == prompt.size();
      auto step = with_retries([&]() -> Result<std::optional<SampledToken>> {
        auto logits = target_.forward(chunk);
        if (!logits) return logits.error();
        record_prompt_logprobs(*logits, first, chunk.size());
        if (!last) return std::optional<SampledToken>();
        return std::optional<SampledToken>(sample_here(logits->last(vocab)));
      });
      if (!step) return step.error();
      if (last) return **step;
    }
  }

  // The log-probabilities of the prompt tokens that rows first.. of a step
  // predict.
  void record_prompt_logprobs(std::span<const float> logits, std::size_t first, std::size_t rows) {
    const auto vocab = static_cast<std::size_t>(target_.config().vocab_size);
    const std::vector<int>& prompt = result_.prompt_tokens;
    for (std::size_t row = 0; row < rows && first + row + 1 < prompt.size(); ++row) {
      const std::size_t at = first + row + 1;
      TokenLogprobs logprobs = logprobs_of(logits.subspan(row * vocab, vocab), prompt[at], options_.top_logprobs);
      name(logprobs, prompt[at - 1]);
      if (options_.on_logprobs) options_.on_logprobs(logprobs, /*prompt=*/true);
      result_.prompt_logprobs.push_back(std::move(logprobs));
    }
  }

  // A step that samples the next token: on the target, or, when
  // log-probabilities are asked for, here from the logits the step returns
  // (the same token: the sampler is the one the target would use).
  template <class LogitsStep, class SampledStep>
  Result<SampledToken> sampling_step(const LogitsStep& logits_step, const SampledStep& sampled_step) {
    if (options_.top_logprobs < 0) return with_retries(sampled_step);
    return with_retries([&]() -> Result<SampledToken> {
      auto logits = logits_step();
      if (!logits) return logits.error();
      return sample_here(*logits);
    });
  }

  // Samples the last row's `logits` and keeps their log-probabilities for
  // the token, until keep() takes it.
  SampledToken sample_here(std::span<const float> logits) {
    const SampledToken sampled = sample_token(sampler_, logits, stop_tokens_);
    sampled_logprobs_ = logprobs_of(logits, sampled.token, options_.top_logprobs);
    return sampled;
  }

  // The texts of a token and its alternatives, each after `previous`.
  void name(TokenLogprobs& logprobs, int previous) const {
    logprobs.chosen.text = tokenizer_.decode(previous, logprobs.chosen.token);
    for (TokenChoice& choice : logprobs.top) choice.text = tokenizer_.decode(previous, choice.token);
  }

  // Saves the prompt's prefix when the cache asked for it: `saved` stays
  // only when every rank published. A failed save is a warning; only a
  // poisoned session ends generation.
  Status save_prompt_cache() {
    if (result_.prompt_cache != PromptCacheOutcome::saved) return {};
    const std::span<const int> prompt(result_.prompt_tokens);
    const auto prefix = prompt.first(prompt.size() - 1);
    Status saved = target_.save_prompt_cache(options_.prompt_cache, generation_cache_descriptor(), prefix);
    if (saved) return {};
    result_.prompt_cache = PromptCacheOutcome::failed;
    result_.prompt_cache_reason = saved.error().message();
    if (is_poisoned(saved.error())) return saved;
    if (warn_) warn_("could not save the prompt cache: " + saved.error().message());
    return {};
  }

  // Emits `sampled` and decodes until a stop rule ends generation.
  Status decode_from(SampledToken sampled) {
    const int context = target_.config().seq_len;
    for (;;) {
      if (sampled.stop) {
        result_.stop_reason = StopReason::end_of_sequence;
        return {};
      }
      const int next = sampled.token;
      keep(next);
      if (options_.stop_requested && options_.stop_requested()) {
        result_.stop_reason = StopReason::stopped;
        return {};
      }
      if (generated() >= options_.max_tokens) return {};
      if (target_.position() >= context) {
        result_.stop_reason = StopReason::context_full;
        return {};
      }
      auto decoded = options_.drafter != nullptr ? decode_speculatively(next) : decode_plainly(next);
      if (!decoded) return decoded.error();
      sampled = *decoded;
      ++result_.decode_steps;
    }
  }

  int generated() const { return static_cast<int>(result_.generated_tokens.size()); }

  // Adds a generated token (and its log-probabilities, when asked for) and
  // emits its piece.
  void keep(int token) {
    const auto& before = result_.generated_tokens.empty() ? result_.prompt_tokens : result_.generated_tokens;
    const int previous = before.back();
    result_.generated_tokens.push_back(token);
    if (sampled_logprobs_) {
      name(*sampled_logprobs_, previous);
      if (options_.on_logprobs) options_.on_logprobs(*sampled_logprobs_, /*prompt=*/false);
      result_.generated_logprobs.push_back(std::move(*sampled_logprobs_));
      sampled_logprobs_.reset();
    }
    emit(previous, token);
  }

  // One decode step of `next` that samples the token after it.
  Result<SampledToken> decode_plainly(int next) {
    // After this step: the token it samples kept, the position one on.
    const bool room = generated() + 1 < options_.max_tokens && target_.position() + 1 < target_.config().seq_len;
    const NextDecode after = room && options_.drafter == nullptr ? NextDecode::likely : NextDecode::unlikely;
    return sampling_step([&] { return target_.decode(next); },
                         [&] { return target_.decode_and_sample(next, sampler_, stop_tokens_, after); });
  }

  // One speculative step after `next`: drafts, verifies, keeps what the
  // target accepted and returns greedy's token after it. The draft stops
  // short of max_tokens and the context, and before any stop token, so
  // what is kept is exactly what plain decoding would have emitted.
  Result<SampledToken> decode_speculatively(int next) {
    const int room = std::min(options_.max_tokens - generated() - 1, target_.config().seq_len - target_.position() - 1);
    std::vector<int> draft;
    if (room > 0) {
      std::vector<int> context = result_.prompt_tokens;
      context.insert(context.end(), result_.generated_tokens.begin(), result_.generated_tokens.end());
      auto proposed = options_.drafter->propose(context, std::min(options_.draft_tokens, room));
      if (!proposed) return proposed.error();
      draft = std::move(*proposed);
      const auto stop = std::find_first_of(draft.begin(), draft.end(), stop_tokens_.begin(), stop_tokens_.end());
      draft.erase(stop, draft.end());
    }
    if (draft.empty()) return decode_plainly(next);
    auto verdict = with_retries([&] { return target_.decode_draft(next, draft); }, Recovery::after_poison);
    if (!verdict) return verdict.error();
    result_.drafted_tokens += static_cast<int>(draft.size());
    result_.accepted_tokens += verdict->accepted;
    for (int i = 0; i < verdict->accepted; ++i) keep(draft[static_cast<std::size_t>(i)]);
    const int token = verdict->next_token;
    return SampledToken{token, is_stop_token(token, stop_tokens_)};
  }

  // Whether a poisoned step may run again, within its retries, once the
  // target recovered its last committed state (heal): a speculative
  // step's may. Any other poisoned step is healed up to heal_attempts.
  enum class Recovery { none, after_poison };

  // Runs a step, and again after each abort, at most options_.retries
  // times more, and after each poison the target healed. An abort, and a
  // heal, leave the target and the sampler as they were after the last
  // committed step, so a step run again that succeeds gives what the first
  // attempt would have.
  template <class Step>
  auto with_retries(const Step& step, Recovery recovery = Recovery::none) -> decltype(step()) {
    for (int attempt = 0;; ++attempt) {
      auto done = step();
      if (done) return done;
      const bool recoverable = recovery == Recovery::after_poison && is_poisoned(done.error());
      if (is_poisoned(done.error()) && !recoverable) {
        if (Status healed = heal(done.error()); !healed) return healed.error();
        continue;
      }
      if (!is_aborted(done.error()) && !recoverable) return done;
      ++result_.aborted_steps;
      if (attempt == options_.retries) return done;
      if (recoverable) {
        if (auto recovered = target_.heal(); !recovered) return done;
        ++result_.recoveries;
      }
      ++result_.retries;
    }
  }

  // Heals the target after `poison`, trying until the attempts of the
  // generation run out, with a growing wait after each that failed. The
  // error keeps the poison's words, which say which rank was lost, and adds
  // why healing failed.
  Status heal(const Error& poison) {
    if (!target_.can_heal() || result_.heal_attempts >= options_.heal_attempts) return poison;
    std::string why;
    auto wait = options_.heal_backoff;
    while (result_.heal_attempts < options_.heal_attempts) {
      ++result_.heal_attempts;
      const auto start = Clock::now();
      auto healed = target_.heal();
      result_.heal_seconds += seconds_since(start);
      if (healed) {
        ++result_.heals;
        result_.replayed_tokens += healed->replayed_tokens;
        if (warn_) {
          warn_("healed: " + std::to_string(healed->replaced_ranks) + " rank(s) started afresh, " +
                std::to_string(healed->cached_tokens) + " committed tokens loaded from the prompt cache and " +
                std::to_string(healed->replayed_tokens) + " replayed, after " + poison.message());
        }
        return {};
      }
      why = healed.error().message();
      if (result_.heal_attempts < options_.heal_attempts) std::this_thread::sleep_for(wait);
      wait *= 2;
    }
    return std::move(Error(poison).append("; healing failed after " + std::to_string(result_.heal_attempts) +
                                          " attempt(s): " + why));
  }

  GenerationTarget& target_;
  const Tokenizer& tokenizer_;
  const GenerationOptions& options_;
  const PieceSink& sink_;
  const WarningSink& warn_;
  Sampler sampler_;
  // The generator's stop rule: sampling BOS or EOS ends generation.
  const std::vector<int> stop_tokens_;
  GenerationResult result_;
  std::optional<TokenLogprobs> sampled_logprobs_;  // of the token sampled last, until kept
};

}  // namespace

std::string_view to_string(StopReason reason) {
  switch (reason) {
    case StopReason::max_tokens: return "max_tokens";
    case StopReason::end_of_sequence: return "end_of_sequence";
    case StopReason::context_full: return "context_full";
    case StopReason::stopped: return "stopped";
    case StopReason::error: return "error";
  }
  return "unknown";
}

std::string_view to_string(PromptCacheOutcome outcome) {
  switch (outcome) {
    case PromptCacheOutcome::unused: return "unused";
    case PromptCacheOutcome::hit: return "hit";
    case PromptCacheOutcome::saved: return "saved";
    case PromptCacheOutcome::rejected: return "rejected";
    case PromptCacheOutcome::failed: return "failed";
  }
  return "unknown";
}

Result<std::vector<int>> encode_prompt(const Tokenizer& tokenizer, std::string_view prompt) {
  return tokenizer.encode(prompt, {.bos = tokenizer.add_bos(), .eos = tokenizer.add_eos(), .parse_special = true});
}

int reusable_prefix_length(std::span<const int> held, std::span<const int> prompt) {
  const auto shared = std::mismatch(held.begin(), held.end(), prompt.begin(), prompt.end()).first - held.begin();
  return static_cast<int>(std::clamp<std::ptrdiff_t>(std::ssize(prompt) - 1, 0, shared));
}

PromptCacheDescriptor generation_cache_descriptor() { return {"prompt-prefix", "accord-generate"}; }

double GenerationResult::prefill_tokens_per_second() const {
  return prefill_seconds > 0 ? static_cast<double>(prompt_tokens.size()) / prefill_seconds : 0.0;
}

double GenerationResult::decode_tokens_per_second() const {
  return decode_seconds > 0 ? decoded_tokens() / decode_seconds : 0.0;
}

double GenerationResult::acceptance_rate() const {
  return drafted_tokens > 0 ? static_cast<double>(accepted_tokens) / drafted_tokens : 0.0;
}

GenerationOutcome generate(GenerationTarget& target, const Tokenizer& tokenizer, std::string_view prompt,
                           const GenerationOptions& options, const PieceSink& sink, const WarningSink& warn) {
  Generation generation(target, tokenizer, options, sink, warn);
  Status done = generation.run(prompt);
  if (!done) return stopped_by(done.error(), std::move(generation.result()));
  return std::move(generation.result());
}

}  // namespace accord
