// The typed messages through which a caller drives a distributed session:
// one TransactionRequest to the coordinator, one TransactionReply back, for
// the whole transaction. The C++ handle (actors/distributed_session.hpp)
// sends exactly these; a service's own actors may send them too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "messages/optional_wire.hpp"
#include "messages/phase_arguments.hpp"
#include "messages/protocol.hpp"
#include "messages/variant_wire.hpp"

namespace accord {

// One forward step: tokens at the committed position.
struct ForwardStepRequest {
  std::vector<std::int32_t> tokens;
  bool all_rows = false;  // logits of every row, or the last
  // The output owner samples the last row (SamplingSynchronization).
  std::optional<SamplingArguments> sampling;
  // The prediction-target phases, the last `prediction_target->count`
  // tokens a draft to verify (0: none).
  std::optional<DraftTokens> prediction_target;
  bool return_logits = true;  // false: the sampled token is enough
  // With sampling: once this step commits on a token that is not a stop
  // token, the coordinator begins the next step on it (chained_step)
  // before the caller asks; that step commits only when the caller's next
  // request is that same step, and aborts when it is anything else
  // (docs/protocol.md, "Chained steps").
  bool chain_next = false;

  bool operator==(const ForwardStepRequest&) const = default;
};

struct CheckpointRequest {
  bool operator==(const CheckpointRequest&) const = default;
};

// Back to a checkpoint's state.
struct RollbackRequest {
  std::int32_t position = 0;
  std::uint64_t state_epoch = 0;
  std::uint64_t reset_epoch = 0;
  bool operator==(const RollbackRequest&) const = default;
};

struct ResetRequest {
  bool operator==(const ResetRequest&) const = default;
};

// The prompt cache under arguments.root, the prefix its tokens; a save
// names its new save id (the same on every rank).
struct PromptCacheSaveRequest {
  PromptCacheArguments arguments;
  bool operator==(const PromptCacheSaveRequest&) const = default;
};

struct PromptCacheLoadRequest {
  PromptCacheArguments arguments;  // save_id unused
  bool operator==(const PromptCacheLoadRequest&) const = default;
};

// Runs no phase: it ends a chained step (ForwardStepRequest::chain_next)
// that the caller will not take, which aborts and every rank restores;
// with none open it commits at once.
struct EndChainRequest {
  bool operator==(const EndChainRequest&) const = default;
};

// A stable copy of the state (runtime/rank/snapshot_shelf.hpp): every rank
// shelves an image of its state under `id`, which is new.
struct SnapshotRequest {
  std::uint64_t id = 0;
  bool operator==(const SnapshotRequest&) const = default;
};

// Back to snapshot `id`'s state, which every rank holds on its shelf.
struct SnapshotRestoreRequest {
  std::uint64_t id = 0;
  bool operator==(const SnapshotRestoreRequest&) const = default;
};

// The operations, in the order of TransactionRequest::operation's
// alternatives.
enum class TransactionKind : std::uint8_t {
  forward_step,
  checkpoint,
  rollback,
  reset,
  prompt_cache_save,
  prompt_cache_load,
  end_chain,
  snapshot,
  snapshot_restore,
};

// One transaction: exactly one operation, with what that operation takes.
struct TransactionRequest {
  std::variant<ForwardStepRequest, CheckpointRequest, RollbackRequest, ResetRequest, PromptCacheSaveRequest,
               PromptCacheLoadRequest, EndChainRequest, SnapshotRequest, SnapshotRestoreRequest>
      operation;

  TransactionKind kind() const { return static_cast<TransactionKind>(operation.index()); }
  bool operator==(const TransactionRequest&) const = default;
};
static_assert(std::variant_size_v<decltype(TransactionRequest::operation)> ==
              static_cast<std::size_t>(TransactionKind::snapshot_restore) + 1);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ForwardStepRequest& x) {
  return f(x.tokens, x.all_rows, x.sampling, x.prediction_target, x.return_logits, x.chain_next);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, CheckpointRequest&) {
  return f();
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RollbackRequest& x) {
  return f(x.position, x.state_epoch, x.reset_epoch);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ResetRequest&) {
  return f();
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PromptCacheSaveRequest& x) {
  return f(x.arguments);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PromptCacheLoadRequest& x) {
  return f(x.arguments);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EndChainRequest&) {
  return f();
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SnapshotRequest& x) {
  return f(x.id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SnapshotRestoreRequest& x) {
  return f(x.id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TransactionRequest& x) {
  return f(x.operation);
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
  std::string phase;  // where it failed
  FailureCode error_code = FailureCode::mechanism;
  std::string message;  // why, when not committed
  // When poisoned (now or by an earlier transaction): the poison's cause
  // and the rank it names (kNoRank: none), its phase and epoch.
  std::string poison_cause;
  RankId poison_rank = kNoRank;
  std::string poison_phase;
  Epoch poison_epoch = 0;
  WireTensor logits;                              // forward_step: (rows, vocab)
  std::vector<RankCheckpointReport> checkpoints;  // checkpoint: one per rank
  std::uint64_t phases_run = 0;                   // phase rounds of this transaction
  SamplingResult sampled;                         // forward_step with sample: the output owner's pick
  PredictionTargetHidden prediction_target;       // with capture_prediction_target: capture and verdict

  bool operator==(const TransactionReply&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TransactionReply& x) {
  return f(x.outcome, x.epoch, x.phase, x.error_code, x.message, x.poison_cause, x.poison_rank, x.poison_phase,
           x.poison_epoch, x.logits, x.checkpoints, x.phases_run, x.sampled, x.prediction_target);
}

}  // namespace accord
