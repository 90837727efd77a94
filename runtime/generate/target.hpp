// What the generator drives: one forward step at a time (one that also
// samples, for generation), and the prompt cache. A single-rank Session and a distributed session both fit.
#pragma once

#include <filesystem>
#include <span>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/model/model.hpp"
#include "runtime/rank/prompt_cache_descriptor.hpp"
#include "runtime/rank/prompt_cache_recovery.hpp"
#include "runtime/session/heal_report.hpp"
#include "runtime/session/session.hpp"
#include "runtime/text/sampler.hpp"

namespace accord {

// What a speculative step kept: how many draft tokens greedy decoding
// reproduced, and its token after them.
struct DraftVerdict {
  int accepted = 0;
  int next_token = -1;
};

// The tokens of a prediction-target step: the last `draft_tokens` of
// `tokens` are a draft; the ones before always commit.
struct PredictionTargetInput {
  std::vector<int> tokens;
  int draft_tokens = 0;
};

// Builds the input of a prediction-target decode: `token`, then `draft`.
inline PredictionTargetInput draft_input(int token, std::span<const int> draft) {
  PredictionTargetInput input{{token}, static_cast<int>(draft.size())};
  input.tokens.insert(input.tokens.end(), draft.begin(), draft.end());
  return input;
}

class GenerationTarget {
 public:
  virtual ~GenerationTarget() = default;

  virtual const ModelConfig& config() const = 0;
  virtual int position() const = 0;
  // The committed tokens, rows [0, position).
  virtual std::span<const int> tokens() const = 0;
  // Moves back to the first `position` committed tokens, keeping their
  // rows (Session::truncate).
  virtual Status truncate(int position) = 0;
  // The logits of every token, (tokens, vocab), valid until the next call.
  virtual Result<std::span<const float>> forward(std::span<const int> tokens) = 0;
  // The logits of the last token, valid until the next call.
  virtual Result<std::span<const float>> prefill(std::span<const int> tokens) = 0;
  virtual Result<std::span<const float>> decode(int token) = 0;
  // A step that also picks the next token with `sampler` from its logits
  // (generation). A target that samples elsewhere (on a distributed
  // session's output owner) overrides these; whatever samples, `sampler`
  // ends exactly as sampling here would leave it, and only when the step
  // succeeds.
  virtual Result<SampledToken> prefill_and_sample(std::span<const int> tokens, Sampler& sampler,
                                                  std::span<const int> stop_tokens) {
    auto logits = prefill(tokens);
    if (!logits) return logits.error();
    return sample_token(sampler, *logits, stop_tokens);
  }
  virtual Result<SampledToken> decode_and_sample(int token, Sampler& sampler, std::span<const int> stop_tokens,
                                                 NextDecode /*next*/) {
    auto logits = decode(token);
    if (!logits) return logits.error();
    return sample_token(sampler, *logits, stop_tokens);
  }
  // Speculative decoding: runs `token` and then `draft` as one
  // prediction-target step (StepOptions::prediction_target), which keeps
  // the longest draft prefix greedy decoding would produce.
  virtual Result<DraftVerdict> decode_draft(int token, std::span<const int> draft) = 0;
  // Brings a poisoned target back to its last committed state, as
  // DistributedSession::heal, where it can_heal(). A single-rank session is
  // never poisoned by a lost rank, so by default there is nothing to heal.
  virtual bool can_heal() const { return false; }
  virtual Result<HealReport> heal() { return Error(ErrorCode::state, "this target cannot heal a poisoned state"); }
  // As Session::load_prompt_cache and save_prompt_cache.
  virtual Status load_prompt_cache(const std::filesystem::path& root, const PromptCacheDescriptor& descriptor,
                                   std::span<const int> prefix) = 0;
  virtual Status save_prompt_cache(const std::filesystem::path& root, const PromptCacheDescriptor& descriptor,
                                   std::span<const int> prefix) = 0;
  // Opening a cache: heals a publication a killed save left mixed, where
  // this process sees every rank's folder (prompt_cache_recovery.hpp).
  virtual Result<PromptCacheRecovery> recover_prompt_cache(const std::filesystem::path& root) {
    return accord::recover_prompt_cache(root);
  }
};

// A single-rank Session as a generation target.
class SessionTarget final : public GenerationTarget {
 public:
  explicit SessionTarget(Session& session) : session_(session) {}

  const ModelConfig& config() const override { return session_.model().config(); }
  int position() const override { return session_.position(); }
  std::span<const int> tokens() const override { return session_.tokens(); }
  Status truncate(int position) override { return session_.truncate(position); }
  Result<std::span<const float>> forward(std::span<const int> tokens) override {
    auto step = session_.forward(tokens);
    if (!step) return step.error();
    return step->logits;
  }
  Result<std::span<const float>> prefill(std::span<const int> tokens) override {
    auto step = session_.prefill(tokens);
    if (!step) return step.error();
    return step->logits;
  }
  Result<std::span<const float>> decode(int token) override {
    auto step = session_.decode(token);
    if (!step) return step.error();
    return step->logits;
  }
  Result<DraftVerdict> decode_draft(int token, std::span<const int> draft) override {
    const PredictionTargetInput input = draft_input(token, draft);
    auto step = session_.step({.tokens = input.tokens, .prediction_target = true, .draft_tokens = input.draft_tokens});
    if (!step) return step.error();
    return DraftVerdict{step->accepted, step->next_token};
  }
  Status load_prompt_cache(const std::filesystem::path& root, const PromptCacheDescriptor& descriptor,
                           std::span<const int> prefix) override {
    return session_.load_prompt_cache(root, descriptor, prefix);
  }
  Status save_prompt_cache(const std::filesystem::path& root, const PromptCacheDescriptor& descriptor,
                           std::span<const int> prefix) override {
    auto saved = session_.save_prompt_cache(root, descriptor, prefix);
    if (!saved) return saved.error();
    return {};
  }

 private:
  Session& session_;
};

}  // namespace accord
