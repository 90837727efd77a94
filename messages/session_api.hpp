// The typed messages through which a caller drives a distributed session:
// one TransactionRequest to the coordinator, one TransactionReply back, for
// the whole transaction. The C++ handle (actors/distributed_session.hpp)
// sends exactly these; a service's own actors may send them too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "messages/phase_arguments.hpp"
#include "messages/protocol.hpp"

namespace accord {

// end_chain runs no phase: it ends a chained step (chain_next) that the
// caller will not take, which aborts and every rank restores; with none
// open it commits at once.
enum class TransactionKind : std::uint8_t {
  forward_step,
  checkpoint,
  rollback,
  reset,
  prompt_cache_save,
  prompt_cache_load,
  end_chain,
};

struct TransactionRequest {
  TransactionKind kind = TransactionKind::forward_step;
  std::vector<std::int32_t> tokens;  // forward_step; the prefix of prompt_cache_save and _load
  bool all_rows = false;             // forward_step: logits of every row, or the last
  std::int32_t position = 0;         // rollback: the checkpoint
  std::uint64_t state_epoch = 0;
  std::uint64_t reset_epoch = 0;
  std::string cache_root;  // prompt_cache_save and _load
  std::string cache_name;
  std::string cache_namespace;
  std::string prepared_input;  // empty for plain tokens
  std::string save_id;         // prompt_cache_save: the new save's id, the same on every rank
  bool sample = false;          // forward_step: the output owner samples (SamplingSynchronization)
  SamplingArguments sampling;   // when sample
  bool capture_prediction_target = false;  // forward_step: the prediction-target phases
  std::int32_t draft_tokens = 0;           // with them: the last tokens that are a draft to verify
  bool return_logits = true;  // forward_step: the reply carries the logits (false: the sampled token is enough)
  // forward_step with sample: once this step commits on a token that is not
  // a stop token, the coordinator begins the next step on it (chained_step)
  // before the caller asks; that step commits only when the caller's next
  // request is that same step, and aborts when it is anything else
  // (docs/protocol.md, "Chained steps").
  bool chain_next = false;

  bool operator==(const TransactionRequest&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TransactionRequest& x) {
  return f(x.kind, x.tokens, x.all_rows, x.position, x.state_epoch, x.reset_epoch, x.cache_root, x.cache_name,
           x.cache_namespace, x.prepared_input, x.save_id, x.sample, x.sampling, x.capture_prediction_target,
           x.draft_tokens, x.return_logits, x.chain_next);
}

// How a transaction ended, for the caller.
enum class TransactionOutcome : std::uint8_t {
  committed,
  refused,   // not begun: bad input, or the session is busy
  aborted,   // every rank restored its state; the session goes on
  poisoned,  // the ranks cannot prove a common state; reset
};

struct TransactionReply {
  TransactionOutcome outcome = TransactionOutcome::committed;
  Epoch epoch = 0;
  std::string phase;        // where it failed
  FailureCode error_code = FailureCode::mechanism;
  std::string message;      // why, when not committed
  // When poisoned (now or by an earlier transaction): the poison's cause
  // and the rank it names (kNoRank: none), its phase and epoch.
  std::string poison_cause;
  RankId poison_rank = kNoRank;
  std::string poison_phase;
  Epoch poison_epoch = 0;
  WireTensor logits;        // forward_step: (rows, vocab)
  std::vector<RankCheckpointReport> checkpoints;  // checkpoint: one per rank
  std::uint64_t phases_run = 0;  // phase rounds of this transaction
  SamplingResult sampled;        // forward_step with sample: the output owner's pick
  PredictionTargetHidden prediction_target;  // with capture_prediction_target: capture and verdict

  bool operator==(const TransactionReply&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TransactionReply& x) {
  return f(x.outcome, x.epoch, x.phase, x.error_code, x.message, x.poison_cause, x.poison_rank, x.poison_phase,
           x.poison_epoch, x.logits, x.checkpoints, x.phases_run, x.sampled, x.prediction_target);
}

}  // namespace accord
