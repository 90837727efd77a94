#include "actors/distributed_target.hpp"

namespace accord {

Result<std::span<const float>> DistributedTarget::keep(Result<DistributedStep> step) {
  if (!step) return step.error();
  logits_ = std::move(step->logits);
  return std::span<const float>(logits_);
}

Result<std::span<const float>> DistributedTarget::forward(std::span<const int> tokens) {
  return keep(session_.forward(tokens));
}

Result<std::span<const float>> DistributedTarget::prefill(std::span<const int> tokens) {
  return keep(session_.prefill(tokens));
}

Result<std::span<const float>> DistributedTarget::decode(int token) { return keep(session_.decode(token)); }

Result<SampledToken> DistributedTarget::prefill_and_sample(std::span<const int> tokens, Sampler& sampler,
                                                           std::span<const int> stop_tokens) {
  auto step =
      session_.step({.tokens = tokens, .sampler = &sampler, .stop_tokens = stop_tokens, .return_logits = false});
  if (!step) return step.error();
  return step->sampled;
}

Result<SampledToken> DistributedTarget::decode_and_sample(int token, Sampler& sampler, std::span<const int> stop_tokens,
                                                          NextDecode next) {
  auto step = session_.step(
      {.tokens = {&token, 1}, .sampler = &sampler, .stop_tokens = stop_tokens, .return_logits = false, .next = next});
  if (!step) return step.error();
  return step->sampled;
}

Result<DraftVerdict> DistributedTarget::decode_draft(int token, std::span<const int> draft) {
  const PredictionTargetInput input = draft_input(token, draft);
  auto step = session_.step({.tokens = input.tokens, .prediction_target = true, .draft_tokens = input.draft_tokens});
  if (!step) return step.error();
  return DraftVerdict{step->accepted, step->next_token};
}

Status DistributedTarget::load_prompt_cache(const std::filesystem::path& root, const PromptCacheDescriptor& descriptor,
                                            std::span<const int> prefix) {
  return session_.load_prompt_cache(root, descriptor, prefix);
}

Status DistributedTarget::save_prompt_cache(const std::filesystem::path& root, const PromptCacheDescriptor& descriptor,
                                            std::span<const int> prefix) {
  auto saved = session_.save_prompt_cache(root, descriptor, prefix);
  if (!saved) return saved.error();
  return {};
}

}  // namespace accord
