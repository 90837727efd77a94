// The messages of the phase protocol (docs/protocol.md): the coordinator
// sends PhaseBegin to every rank, each rank answers PhaseStatus, the
// coordinator sends one PhaseDecision to all;
// after an abort every rank answers AbortAcknowledgement. Activations on a
// route travel as WireTensor.
//
// Protocol types only: no CAF include. Every type has an inspect() overload
// in the form CAF 0.17.6 expects (`f(x.a, x.b, ...)`), and enums travel as
// their underlying integer; actors/message_registry.cpp registers them all.
// Values decoded from the wire are not validated here: an enum may hold a
// value that names nothing, which to_string() shows and receivers reject.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "messages/phase.hpp"
#include "messages/phase_arguments.hpp"
#include "messages/weights.hpp"

namespace accord {

using SessionId = std::uint64_t;
// A transaction's number; only grows within a session.
using Epoch = std::uint64_t;

// A phase that begins with another and runs right after it
// (runtime/agreement/transaction_plan.hpp), with its arguments.
struct Rider {
  PhaseId phase;
  PhaseArguments arguments;

  bool operator==(const Rider&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Rider& x) {
  return f(x.phase, x.arguments);
}

// Starts a rank's local part of one phase of transaction `epoch`.
struct PhaseBegin {
  SessionId session = 0;
  Epoch epoch = 0;
  PhaseId phase;
  // The phase's input (token ids, cache paths, ...; phase_arguments.hpp);
  // NoArguments when the phase takes none.
  PhaseArguments arguments;
  // The phases that ride with this one (runtime/agreement/
  // transaction_plan.hpp): the rank runs and reports each right after it.
  std::vector<Rider> riders;

  bool operator==(const PhaseBegin&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PhaseBegin& x) {
  return f(x.session, x.epoch, x.phase, x.arguments, x.riders);
}

// Why a rank's local part failed: the wire form of the runtime's ErrorCode
// (runtime/base/error.hpp) for the codes a rank's work can produce. It lives here
// because messages/ depends on nothing else of ours.
enum class FailureCode : std::uint8_t {
  contract,      // a broken precondition: bad arguments for the phase
  io,            // a file could not be opened, read or written
  format,        // a malformed file
  architecture,  // well-formed files that do not fit together
  state,         // the rank's state does not allow the phase (poisoned, unsettled)
  prompt_cache,  // a prompt cache shard was refused
  mechanism,     // the machinery failed: an observer, a kernel, a device, an injected fault
};

inline std::string to_string(FailureCode code) {
  switch (code) {
    case FailureCode::contract: return "contract";
    case FailureCode::io: return "io";
    case FailureCode::format: return "format";
    case FailureCode::architecture: return "architecture";
    case FailureCode::state: return "state";
    case FailureCode::prompt_cache: return "prompt_cache";
    case FailureCode::mechanism: return "mechanism";
  }
  return "unknown_failure(" + std::to_string(static_cast<int>(code)) + ")";
}

// A rank's answer to PhaseBegin: its local part of `phase` succeeded, or
// failed with a code and a message for the person who ran the command.
struct PhaseStatus {
  SessionId session = 0;
  Epoch epoch = 0;
  PhaseId phase;
  RankId rank = kNoRank;
  bool ok = true;
  FailureCode error_code = FailureCode::mechanism;  // meaningful when !ok
  std::string error_message;                        // empty when ok

  bool operator==(const PhaseStatus&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PhaseStatus& x) {
  return f(x.session, x.epoch, x.phase, x.rank, x.ok, x.error_code, x.error_message);
}

enum class Decision : std::uint8_t {
  proceed,  // every rank succeeded; go on to the transaction's next phase
  commit,   // every rank succeeded in the final phase; provisional state becomes authoritative
  abort,    // restore the transaction's checkpoint and acknowledge
  poison,   // the ranks can no longer prove a common state: refuse work until a reset
};

inline std::string to_string(Decision decision) {
  switch (decision) {
    case Decision::proceed: return "proceed";
    case Decision::commit: return "commit";
    case Decision::abort: return "abort";
    case Decision::poison: return "poison";
  }
  return "unknown_decision(" + std::to_string(static_cast<int>(decision)) + ")";
}

// What led to an abort or a poison.
enum class CauseKind : std::uint8_t {
  none,                     // proceed or commit
  rank_error,               // the rank reported an error status
  status_timeout,           // the rank's status did not arrive within the deadline
  rank_down,                // the rank is gone
  restore_failed,           // the rank could not restore the transaction's checkpoint
  acknowledgement_timeout,  // the rank's abort acknowledgement did not arrive within the deadline
  withdrawn,                // the caller did not take a step begun before it asked (a chained step)
};

inline std::string to_string(CauseKind kind) {
  switch (kind) {
    case CauseKind::none: return "none";
    case CauseKind::rank_error: return "rank_error";
    case CauseKind::status_timeout: return "status_timeout";
    case CauseKind::rank_down: return "rank_down";
    case CauseKind::restore_failed: return "restore_failed";
    case CauseKind::acknowledgement_timeout: return "acknowledgement_timeout";
    case CauseKind::withdrawn: return "withdrawn";
  }
  return "unknown_cause(" + std::to_string(static_cast<int>(kind)) + ")";
}

struct DecisionCause {
  CauseKind kind = CauseKind::none;
  RankId rank = kNoRank;                            // the rank it names
  FailureCode error_code = FailureCode::mechanism;  // for rank_error
  std::string message;                              // the rank's own words, when it sent any

  bool operator==(const DecisionCause&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, DecisionCause& x) {
  return f(x.kind, x.rank, x.error_code, x.message);
}

// "rank 2 reported mechanism: observer threw", "rank 1 is down", ...
inline std::string describe(const DecisionCause& cause) {
  const std::string rank = "rank " + std::to_string(cause.rank);
  const std::string detail = cause.message.empty() ? "" : ": " + cause.message;
  switch (cause.kind) {
    case CauseKind::none: return "no failure";
    case CauseKind::rank_error: return rank + " reported " + to_string(cause.error_code) + detail;
    case CauseKind::status_timeout: return rank + " did not report within the deadline";
    case CauseKind::rank_down: return rank + " is down";
    case CauseKind::restore_failed: return rank + " failed to restore" + detail;
    case CauseKind::acknowledgement_timeout: return rank + " did not acknowledge the abort within the deadline";
    case CauseKind::withdrawn: return "the caller did not take the step begun for it";
  }
  return to_string(cause.kind);
}

// The coordinator's one decision on `phase`, the same for every rank.
struct PhaseDecision {
  SessionId session = 0;
  Epoch epoch = 0;
  PhaseId phase;
  Decision decision = Decision::proceed;
  DecisionCause cause;  // kind none for proceed and commit

  bool operator==(const PhaseDecision&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PhaseDecision& x) {
  return f(x.session, x.epoch, x.phase, x.decision, x.cause);
}

// "poison at Execution of epoch 7: rank 1 is down".
inline std::string describe(const PhaseDecision& decision) {
  std::string text =
      to_string(decision.decision) + " at " + to_string(decision.phase) + " of epoch " + std::to_string(decision.epoch);
  if (decision.cause.kind != CauseKind::none) text += ": " + describe(decision.cause);
  return text;
}

// A rank's answer to an abort: it restored transaction `epoch`'s checkpoint,
// or could not (and says why).
struct AbortAcknowledgement {
  SessionId session = 0;
  Epoch epoch = 0;
  RankId rank = kNoRank;
  bool restored = true;
  std::string error_message;  // empty when restored

  bool operator==(const AbortAcknowledgement&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, AbortAcknowledgement& x) {
  return f(x.session, x.epoch, x.rank, x.restored, x.error_message);
}

// Hidden activations crossing a route on CPUs: row-major `data` of `shape`.
struct WireTensor {
  std::vector<std::int64_t> shape;
  std::vector<float> data;

  bool operator==(const WireTensor&) const = default;
};

// On the wire the floats travel as their raw bytes, little-endian: CAF
// 0.17.6's binary serializer packs floats in a portable form that loses
// subnormals, and a remote rank must see the activations bit for bit
// (docs/invariants.md, invariant 1). A byte sequence is also what CAF
// copies in one piece rather than value by value, which matters for a
// step's logits (tens of thousands of floats). CAF's inspectors say
// whether they read a value (serializers, printing) or write one
// (deserializers).
static_assert(std::endian::native == std::endian::little, "WireTensor sends its floats as they lie in memory");

inline std::vector<unsigned char> float_bytes(const std::vector<float>& values) {
  std::vector<unsigned char> bytes(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// The floats of `bytes`; a trailing partial float is dropped.
inline std::vector<float> floats_from_bytes(const std::vector<unsigned char>& bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

template <class Inspector>
std::enable_if_t<Inspector::reads_state, typename Inspector::result_type> inspect(Inspector& f, WireTensor& x) {
  auto bytes = float_bytes(x.data);
  return f(x.shape, bytes);
}

template <class Inspector>
std::enable_if_t<Inspector::writes_state, typename Inspector::result_type> inspect(Inspector& f, WireTensor& x) {
  std::vector<unsigned char> bytes;
  auto result = f(x.shape, bytes);
  x.data = floats_from_bytes(bytes);
  return result;
}

// Activations crossing `route` in transaction `epoch`, sent by the route's
// source rank to its target once BoundarySourceCompletion was agreed.
struct RouteTransfer {
  SessionId session = 0;
  Epoch epoch = 0;
  CommunicationRouteId route;
  WireTensor activations;

  bool operator==(const RouteTransfer&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RouteTransfer& x) {
  return f(x.session, x.epoch, x.route, x.activations);
}

// A routed block's rows on an expert route (docs/protocol.md, "Expert
// routes") in transaction `epoch`. From the rank that runs `unit` to a rank
// that holds some of its experts: each slot's expert and normed row (a
// dispatch). Back: each slot's output, in the same order (a return; no
// experts). Every unit of the stage sends one each way, empty or not.
struct ExpertTransfer {
  SessionId session = 0;
  Epoch epoch = 0;
  CommunicationRouteId route;
  std::int32_t unit = 0;
  std::vector<std::int32_t> experts;
  WireTensor rows;

  bool operator==(const ExpertTransfer&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ExpertTransfer& x) {
  return f(x.session, x.epoch, x.route, x.unit, x.experts, x.rows);
}

// The output owner's logits of transaction `epoch`, sent to the
// coordinator in OutputPublication, before the rank's status.
struct StepOutput {
  SessionId session = 0;
  Epoch epoch = 0;
  WireTensor logits;

  bool operator==(const StepOutput&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StepOutput& x) {
  return f(x.session, x.epoch, x.logits);
}

// The token the output owner sampled in SamplingSynchronization of
// transaction `epoch`, whether it ends generation, and where the sampler's
// random stream stands after it; sent to every other rank and to the
// coordinator before the owner's status.
struct SamplingResult {
  SessionId session = 0;
  Epoch epoch = 0;
  std::int32_t token = 0;
  bool stop = false;
  std::uint64_t rng_state = 0;

  bool operator==(const SamplingResult&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SamplingResult& x) {
  return f(x.session, x.epoch, x.token, x.stop, x.rng_state);
}

// The output owner's prediction-target capture of transaction `epoch`
// (runtime/rank/prediction_target.hpp): the residual stream after the
// last unit, before the final norm, of the last kept row, (1, dim), and
// the verdict on the step's draft. Sent in
// PredictionTargetCapturePublication to every other rank and to the
// coordinator, before the owner's status.
struct PredictionTargetHidden {
  SessionId session = 0;
  Epoch epoch = 0;
  WireTensor hidden;
  std::int32_t kept_rows = 0;
  std::int32_t accepted = 0;
  std::int32_t next_token = -1;

  bool operator==(const PredictionTargetHidden&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PredictionTargetHidden& x) {
  return f(x.session, x.epoch, x.hidden, x.kept_rows, x.accepted, x.next_token);
}

// What a rank recorded for a distributed checkpoint (SessionCheckpoint),
// sent to the coordinator before the rank's status.
struct RankCheckpointReport {
  SessionId session = 0;
  Epoch epoch = 0;
  RankId rank = kNoRank;
  std::int32_t position = 0;
  std::uint64_t state_epoch = 0;
  std::uint64_t reset_epoch = 0;
  std::string digest;

  bool operator==(const RankCheckpointReport&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RankCheckpointReport& x) {
  return f(x.session, x.epoch, x.rank, x.position, x.state_epoch, x.reset_epoch, x.digest);
}

// A rank's state as it stands after every decision sent to it so far: its
// digest (an empty one: the rank did not answer) and what its KV holds.
struct RankStateReport {
  std::string digest;
  std::int32_t position = 0;
  std::uint64_t state_epoch = 0;
  std::uint64_t kv_bytes_used = 0;
  std::uint64_t kv_bytes_capacity = 0;      // the whole context's
  std::uint64_t kv_held_bytes = 0;          // what the paged cache holds now
  std::int32_t high_water = 0;              // the highest row ever written, plus one
  std::uint64_t kv_materialized_bytes = 0;  // of the rows ever written
  double compute_seconds = 0;               // in the rank's units and head so far
  WeightShare weights;                      // what the rank holds of the model's weights
  // What a snapshot of the state would cost now (KvStore::freeze_cost).
  std::uint64_t snapshot_copied_bytes = 0;
  std::uint64_t snapshot_shared_bytes = 0;
  std::uint64_t snapshot_copy_on_write_bytes = 0;
  // Of a mixture of experts: the rows each expert computed on the rank so
  // far, over every block (n_experts; empty for a dense model).
  std::vector<std::uint64_t> expert_rows;

  bool operator==(const RankStateReport&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RankStateReport& x) {
  return f(x.digest, x.position, x.state_epoch, x.kv_bytes_used, x.kv_bytes_capacity, x.kv_held_bytes, x.high_water,
           x.kv_materialized_bytes, x.compute_seconds, x.weights, x.snapshot_copied_bytes, x.snapshot_shared_bytes,
           x.snapshot_copy_on_write_bytes, x.expert_rows);
}

// The save a rank's live prompt-cache generation belongs to
// (PromptCacheLoadPreflight), sent to the coordinator before the rank's
// status. The coordinator hands rank 0's to every rank for the next phase.
struct PromptCacheReport {
  SessionId session = 0;
  Epoch epoch = 0;
  RankId rank = kNoRank;
  std::string save_id;

  bool operator==(const PromptCacheReport&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PromptCacheReport& x) {
  return f(x.session, x.epoch, x.rank, x.save_id);
}

// What the coordinator sends a rank: a phase's begin or its decision.
using RankInstruction = std::variant<PhaseBegin, PhaseDecision>;
// What a rank sends the coordinator: its statuses and acknowledgements, and
// what goes beside them.
using RankReport = std::variant<PhaseStatus, AbortAcknowledgement, StepOutput, SamplingResult, PredictionTargetHidden,
                                RankCheckpointReport, PromptCacheReport>;

// Several instructions for one rank, or several reports of one rank, that
// were ready at once, sent as one message and taken in order. A batch is
// the transport's, not the protocol's: every phase keeps its own status and
// decision (actors/: a forward step's statuses and decisions would
// otherwise cost a message each). The items travel as messages/
// variant_wire.hpp says.
struct RankInstructions {
  std::vector<RankInstruction> items;

  bool operator==(const RankInstructions&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RankInstructions& x) {
  return f(x.items);
}

struct RankReports {
  std::vector<RankReport> items;

  bool operator==(const RankReports&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RankReports& x) {
  return f(x.items);
}

}  // namespace accord
