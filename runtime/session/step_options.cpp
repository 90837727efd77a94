#include "runtime/session/step_options.hpp"

#include <string>

#include "runtime/model/transformer.hpp"

namespace accord {

Status check_step(const ModelConfig& config, const StepOptions& options, int position) {
  if (Status ok = check_tokens(config, options.tokens, position); !ok) return ok;
  const int n = static_cast<int>(options.tokens.size());
  if (options.prediction_target && (options.draft_tokens < 0 || options.draft_tokens >= n)) {
    return Error(ErrorCode::contract, "a prediction-target step of " + std::to_string(n) +
                                          " token(s) cannot hold a draft of " + std::to_string(options.draft_tokens) +
                                          ": at least one token must come before the draft");
  }
  if (options.sampler != nullptr) return validate(options.sampler->options());
  return {};
}

Status check_truncation(int target, int position) {
  if (target >= 0 && target <= position) return {};
  return Error(ErrorCode::contract, "a session at position " + std::to_string(position) +
                                        " cannot move back to position " + std::to_string(target));
}

}  // namespace accord
