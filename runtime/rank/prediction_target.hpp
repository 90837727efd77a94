// Speculative decoding's target side. A prediction-target step runs the
// tokens a generator has committed to, followed by a draft of tokens it
// only guesses, at the current position. The rows it writes form a *lane*:
// a fork of the state at the step's first position, provisional until the
// step commits. The output owner verifies the draft greedily against the
// lane's logits (PredictionTargetCapture) and every rank learns the
// verdict (PredictionTargetCapturePublication), validates it against its
// own lane (PredictionTargetStatePreparation) and rolls the rejected rows
// back (PredictionExtensionExecution); the commit keeps the rest. A draft
// that greedy decoding would not have produced never reaches the state,
// and a failure anywhere restores the rows as they were before the step.
//
// Every kernel reduces a row in one order whatever the batch, so a kept
// row's logits equal bit for bit those a plain decode of the same tokens
// gives.
#pragma once

#include <span>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/rank/rank_stage.hpp"
#include "runtime/rank/state.hpp"

namespace accord {

// What the output owner decides and publishes to every rank.
struct PredictionTargetState {
  int kept_rows = 0;          // the step's rows that commit: committed tokens and accepted draft
  int accepted = 0;           // draft tokens kept
  int next_token = -1;        // greedy decoding's token after the kept rows
  std::vector<float> hidden;  // the capture: the final hidden state of the last kept row, (dim)
};

// PredictionTargetCapture, on the output owner after its units ran:
// `logits` holds the step's last draft_tokens + 1 rows (or more). Keeps the
// longest draft prefix that greedy decoding reproduces.
PredictionTargetState verify_draft(RankStage& stage, std::span<const float> logits, std::span<const int> tokens,
                                   int draft_tokens);

// PredictionTargetStatePreparation: checks that `verdict` is a lane swap
// this step can make: it keeps every committed token and no more rows than
// the lane has.
Status check_lane_swap(const PredictionTargetState& verdict, int step_rows, int draft_tokens);

// Where the last kept row's logits begin in the logits of the step's last
// `logit_rows` rows, each `width` wide.
std::size_t kept_row_offset(const PredictionTargetState& verdict, int step_rows, int logit_rows, int width);

// PredictionExtensionExecution: rolls the lane's rejected rows back to
// what `undo` (captured at the step's start) holds; the commit keeps the
// first verdict.kept_rows.
void drop_rejected_rows(SessionState& state, const SessionState::Undo& undo, const PredictionTargetState& verdict);

}  // namespace accord
