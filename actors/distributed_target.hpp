// A distributed session as a generation target (runtime/generate/target.hpp):
// its generation steps sample on the output owner through
// SamplingSynchronization.
#pragma once

#include <filesystem>
#include <span>
#include <vector>

#include "actors/distributed_session.hpp"
#include "runtime/generate/target.hpp"

namespace accord {

class DistributedTarget final : public GenerationTarget {
 public:
  DistributedTarget(DistributedSession& session, const Model& model) : session_(session), model_(model) {}

  const ModelConfig& config() const override { return model_.config(); }
  int position() const override { return session_.position(); }
  std::span<const int> tokens() const override { return session_.tokens(); }
  Status truncate(int position) override { return session_.truncate(position); }
  Result<std::span<const float>> forward(std::span<const int> tokens) override;
  Result<std::span<const float>> prefill(std::span<const int> tokens) override;
  Result<std::span<const float>> decode(int token) override;
  Result<SampledToken> prefill_and_sample(std::span<const int> tokens, Sampler& sampler,
                                          std::span<const int> stop_tokens) override;
  Result<SampledToken> decode_and_sample(int token, Sampler& sampler, std::span<const int> stop_tokens,
                                         NextDecode next) override;
  Result<DraftVerdict> decode_draft(int token, std::span<const int> draft) override;
  bool can_heal() const override { return true; }
  Result<HealReport> heal() override { return session_.heal(); }
  Status load_prompt_cache(const std::filesystem::path& root, const PromptCacheDescriptor& descriptor,
                           std::span<const int> prefix) override;
  Status save_prompt_cache(const std::filesystem::path& root, const PromptCacheDescriptor& descriptor,
                           std::span<const int> prefix) override;
  Result<PromptCacheRecovery> recover_prompt_cache(const std::filesystem::path& root) override {
    return session_.recover_prompt_cache(root);
  }

 private:
  Result<std::span<const float>> keep(Result<DistributedStep> step);

  DistributedSession& session_;
  const Model& model_;
  std::vector<float> logits_;
};

}  // namespace accord
