// A rank's side of the phase protocol as a pure state machine: what the
// rank decides, without CAF or I/O. Its RankParticipant (runtime/engine) feeds it the
// coordinator's messages (step) and the results of the local work it asked
// for (phase_done, phase_failed, restored, restore_failed); it carries out
// the actions and sends the messages it takes from take_ready().
//
// Rules (docs/protocol.md):
// - PhaseBegin for a new epoch opens a transaction, for the current epoch
//   continues it after a proceed; either asks for the local work (RunPhase)
//   and answers its result with PhaseStatus. The begin's riders
//   (transaction_plan.hpp) run and are reported one after another once the
//   phase's work succeeded, without waiting for the decisions in between;
//   those decisions come in order, and an abort may name any phase of the
//   round.
// - proceed waits for the next phase; commit asks to commit; abort asks to
//   restore once the local work in flight has finished (never under it) and
//   answers AbortAcknowledgement; poison marks the rank poisoned (MarkPoisoned
//   likewise waits for local work in flight, and a reset that begins
//   meanwhile runs once that work's result is back).
// - A poisoned rank answers every begin but a reset's with an error status,
//   and every abort with a failed restore, until a reset commits. A rank
//   that gets a new epoch before the previous one settled cannot prove its
//   state and poisons itself.
// - Messages for another session or epoch, duplicates, late and out-of-order
//   ones are dropped and counted.
//
// Threading: not thread-safe; owned by the rank's RankParticipant.
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "messages/protocol.hpp"
#include "runtime/agreement/dropped_messages.hpp"

namespace accord {

// Run the rank's local part of `phase`; report with phase_done/phase_failed.
struct RunPhase {
  Epoch epoch = 0;
  PhaseId phase;
  PhaseArguments arguments;
  bool operator==(const RunPhase&) const = default;
};
// Make transaction `epoch`'s provisional state authoritative.
struct CommitTransaction {
  Epoch epoch = 0;
  bool operator==(const CommitTransaction&) const = default;
};
// Restore transaction `epoch`'s checkpoint; report with restored/restore_failed.
struct RestoreCheckpoint {
  Epoch epoch = 0;
  bool operator==(const RestoreCheckpoint&) const = default;
};
// The session is poisoned (`cause`; the rank keeps the first one it heard):
// drop provisional state once the local work in flight stopped, refuse work.
struct MarkPoisoned {
  PhaseDecision cause;
  bool operator==(const MarkPoisoned&) const = default;
};

using RankAction = std::variant<RunPhase, CommitTransaction, RestoreCheckpoint, MarkPoisoned>;
using RankMessage = std::variant<PhaseStatus, AbortAcknowledgement>;

struct RankReady {
  std::vector<RankMessage> messages;  // to the coordinator, in order
  std::vector<RankAction> actions;    // for the rank's actors, in order
};

class RankAgreement {
 public:
  RankAgreement(SessionId session, RankId rank);

  void step(const PhaseBegin& begin);
  void step(const PhaseDecision& decision);

  // The local work of RunPhase{epoch, phase} finished.
  void phase_done(Epoch epoch, const PhaseId& phase);
  void phase_failed(Epoch epoch, const PhaseId& phase, FailureCode code, std::string message);
  // The RestoreCheckpoint{epoch} finished.
  void restored(Epoch epoch);
  void restore_failed(Epoch epoch, std::string message);

  RankReady take_ready() {
    RankReady ready;
    take_ready(ready);
    return ready;
  }
  // The same into `ready`, whose earlier contents are dropped and whose
  // buffers the machine keeps for what comes next: a caller that takes
  // into the same RankReady each time allocates nothing once they have
  // grown (a decode step runs a dozen phases a rank).
  void take_ready(RankReady& ready);

  bool poisoned() const { return poison_.has_value(); }
  // Why, while poisoned: the coordinator's decision or the rank's own finding.
  const std::optional<PhaseDecision>& poison() const { return poison_; }
  // True when no transaction of this rank awaits anything.
  bool settled() const { return stage_ == Stage::settled; }
  Epoch epoch() const { return epoch_; }
  const DroppedMessages& dropped() const { return dropped_; }

 private:
  enum class Stage {
    settled,            // the last transaction committed, aborted or was poisoned
    working,            // the local part of phase_ runs
    awaiting_decision,  // status sent
    between_phases,     // the round proceeded; the next phase of epoch_ has not begun
    restoring,          // the checkpoint is being restored
  };

  void open_transaction(const PhaseBegin& begin);
  void run(const PhaseBegin& begin);
  void start_round(const PhaseBegin& begin);
  void start_work(const PhaseId& phase, PhaseArguments arguments);
  void apply_success(const PhaseDecision& decision, std::size_t index);
  void refuse(const PhaseBegin& begin);
  void report_local_result(Epoch epoch, const PhaseId& phase, bool ok, FailureCode code, std::string message);
  void apply_decision(const PhaseDecision& decision);
  void apply_abort();
  void finish_restore(Epoch epoch, bool ok, std::string message);
  void become_poisoned(PhaseDecision cause);
  PhaseDecision own_poison(DecisionCause cause) const;

  SessionId session_;
  RankId rank_;
  Stage stage_ = Stage::settled;
  Epoch epoch_ = 0;  // the newest transaction begun
  PhaseId phase_;    // the phase whose work runs or ran last
  // The round begun last: its phase, then its riders. The first
  // `reported_ok_` of them were reported ok, the first `decided_` decided;
  // `next_rider_` is the index of the next one to run.
  std::vector<PhaseId> round_;
  std::vector<PhaseArguments> rider_arguments_;  // round_[i + 1]'s
  std::size_t reported_ok_ = 0;
  std::size_t decided_ = 0;
  std::size_t next_rider_ = 0;
  bool closed_ = false;           // the round was committed, aborted or poisoned
  bool abort_requested_ = false;  // abort arrived while phase_ was working
  bool in_reset_ = false;         // epoch_ is a reset transaction
  // The local part of (epoch_, phase_) runs, whatever was decided since:
  // nothing else may touch the rank's state until its result is back.
  bool work_in_flight_ = false;
  std::optional<PhaseBegin> deferred_begin_;  // a transaction that waits for it
  std::optional<PhaseDecision> poison_;
  DroppedMessages dropped_;
  RankReady ready_;
};

}  // namespace accord
