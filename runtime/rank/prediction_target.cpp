#include "runtime/rank/prediction_target.hpp"

#include <string>

#include "runtime/text/sampler.hpp"

namespace accord {

PredictionTargetState verify_draft(RankStage& stage, std::span<const float> logits, std::span<const int> tokens,
                                   int draft_tokens) {
  const auto vocab = static_cast<std::size_t>(stage.config().vocab_size);
  const int rows = static_cast<int>(logits.size() / vocab);
  const auto draft = tokens.last(static_cast<std::size_t>(draft_tokens));
  // Row `first_check` holds the logits after the last committed token.
  const int first_check = rows - draft_tokens - 1;
  auto row = [&](int r) { return logits.subspan(static_cast<std::size_t>(first_check + r) * vocab, vocab); };
  PredictionTargetState verdict;
  while (verdict.accepted < draft_tokens &&
         argmax(row(verdict.accepted)) == draft[static_cast<std::size_t>(verdict.accepted)]) {
    ++verdict.accepted;
  }
  verdict.next_token = argmax(row(verdict.accepted));
  verdict.kept_rows = static_cast<int>(tokens.size()) - draft_tokens + verdict.accepted;
  const auto hidden = stage.prediction_target_capture(verdict.kept_rows - 1);
  verdict.hidden.assign(hidden.begin(), hidden.end());
  return verdict;
}

Status check_lane_swap(const PredictionTargetState& verdict, int step_rows, int draft_tokens) {
  if (draft_tokens < 0 || draft_tokens >= step_rows) {
    return Error(ErrorCode::contract, "a draft of " + std::to_string(draft_tokens) +
                                          " token(s) does not fit a step of " + std::to_string(step_rows) +
                                          " row(s): at least one row must commit");
  }
  const int committed = step_rows - draft_tokens;
  if (verdict.kept_rows < committed || verdict.kept_rows > step_rows ||
      verdict.accepted != verdict.kept_rows - committed) {
    return Error(ErrorCode::contract, "the verdict keeps " + std::to_string(verdict.kept_rows) + " row(s) with " +
                                          std::to_string(verdict.accepted) + " accepted, but the lane has " +
                                          std::to_string(step_rows) + " row(s) of which " + std::to_string(committed) +
                                          " must commit");
  }
  return {};
}

std::size_t kept_row_offset(const PredictionTargetState& verdict, int step_rows, int logit_rows, int width) {
  const int row = verdict.kept_rows - 1 - (step_rows - logit_rows);
  return static_cast<std::size_t>(row) * static_cast<std::size_t>(width);
}

void drop_rejected_rows(SessionState& state, const SessionState::Undo& undo, const PredictionTargetState& verdict) {
  state.restore_rows_after(undo, verdict.kept_rows);
}

}  // namespace accord
