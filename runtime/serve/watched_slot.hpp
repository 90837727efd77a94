// A slot whose session tells a SlotWatch (cluster_status.hpp) what it
// does: each step's outcome, the poison that names a lost rank, each heal,
// each reset, and after each request what its ranks hold. It wraps the
// slot the scheduler would hold, and is held by the scheduler instead; the
// watch is shared with Metrics, which reads it from any thread.
#pragma once

#include <memory>

#include "runtime/serve/cluster_status.hpp"
#include "runtime/serve/scheduler.hpp"

namespace accord::serve {

// The slot's target, seen through: every call goes to the inner target.
class WatchedTarget final : public GenerationTarget {
 public:
  WatchedTarget(GenerationTarget& inner, SlotWatch& watch) : inner_(inner), watch_(watch) {}

  const ModelConfig& config() const override { return inner_.config(); }
  int position() const override { return inner_.position(); }
  std::span<const int> tokens() const override { return inner_.tokens(); }
  Status truncate(int position) override { return inner_.truncate(position); }
  Result<std::span<const float>> forward(std::span<const int> tokens) override;
  Result<std::span<const float>> prefill(std::span<const int> tokens) override;
  Result<std::span<const float>> decode(int token) override;
  Result<SampledToken> prefill_and_sample(std::span<const int> tokens, Sampler& sampler,
                                          std::span<const int> stop_tokens) override;
  Result<SampledToken> decode_and_sample(int token, Sampler& sampler, std::span<const int> stop_tokens,
                                         NextDecode next) override;
  Result<DraftVerdict> decode_draft(int token, std::span<const int> draft) override;
  bool can_heal() const override { return inner_.can_heal(); }
  Result<HealReport> heal() override;
  Status load_prompt_cache(const std::filesystem::path& root, const PromptCacheDescriptor& descriptor,
                           std::span<const int> prefix) override {
    return inner_.load_prompt_cache(root, descriptor, prefix);
  }
  Status save_prompt_cache(const std::filesystem::path& root, const PromptCacheDescriptor& descriptor,
                           std::span<const int> prefix) override {
    return inner_.save_prompt_cache(root, descriptor, prefix);
  }
  Result<PromptCacheRecovery> recover_prompt_cache(const std::filesystem::path& root) override {
    return inner_.recover_prompt_cache(root);
  }

 private:
  // Tells the watch how a step ended; `tokens` it sampled when it committed.
  template <class T>
  Result<T> seen(Result<T> step, int tokens) {
    watch_.end_step(step ? nullptr : &step.error(), tokens);
    return step;
  }

  GenerationTarget& inner_;
  SlotWatch& watch_;
};

class WatchedSlot final : public SlotSession {
 public:
  // Reads the inner slot's ranks into the watch at once.
  WatchedSlot(std::unique_ptr<SlotSession> inner, std::shared_ptr<SlotWatch> watch);

  GenerationTarget& target() override { return target_; }
  Status reset() override;
  void begin_request() override;
  void end_request() override;
  bool takes_snapshots() const override { return inner_->takes_snapshots(); }
  Result<SessionSnapshot> snapshot() override { return inner_->snapshot(); }
  Status restore(const SessionSnapshot& snapshot) override { return inner_->restore(snapshot); }
  Result<std::vector<RankFigures>> rank_figures() override { return inner_->rank_figures(); }

 private:
  void read_ranks();

  std::unique_ptr<SlotSession> inner_;
  std::shared_ptr<SlotWatch> watch_;
  WatchedTarget target_;
};

}  // namespace accord::serve
