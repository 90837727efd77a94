// The coordinator's side of the phase protocol as a pure state machine (in
// the manner of etcd's raft package): no CAF, no I/O, no clock. The
// coordinator actor feeds it what arrives (step), what the monitor reports
// (rank_down, rank_up) and its timer (tick), sends the messages it takes from
// take_ready(), and hands the settled decisions to the caller. Every
// ordering, timeout and duplicate can be tested without threads.
//
// Rules (docs/protocol.md, "Decision rules (coordinator)"):
// - begin() sends PhaseBegin to every rank. Every status ok: proceed, or
//   commit when the caller said the phase is the transaction's last.
// - A phase may have riders (transaction_plan.hpp): phases that begin with
//   it and that every rank runs and reports right after it. Their statuses
//   may arrive before their turn; each is still decided in order, once
//   every rank's status for it is in, and an error status for any of them
//   aborts at once. A phase's status deadline runs from the decision of the
//   phase before it (the round's begin for the first).
// - The first error status, or the status deadline passing: abort, sent to
//   every rank; then every rank must acknowledge. All restored: the
//   transaction is aborted and the session stays usable.
// - A restore that failed, acknowledgements missing at the deadline, or a
//   rank reported down (at any time): poison, sent to every reachable rank.
//   A poisoned session refuses begin() with the cause until a reset
//   transaction (begin_reset) commits on every rank.
// - Replies for another session, epoch or phase, from unknown or down ranks,
//   duplicates and replies after the decision are dropped and counted.
//
// Threading: not thread-safe; owned by one actor.
#pragma once

#include <cstdint>
#include <optional>
#include <variant>
#include <vector>

#include "messages/protocol.hpp"
#include "runtime/agreement/dropped_messages.hpp"
#include "runtime/base/error.hpp"

namespace accord {

struct AgreementOptions {
  // Ticks a phase waits for every rank's status; then it aborts.
  std::uint32_t status_deadline_ticks = 10;
  // Ticks an abort waits for every rank's acknowledgement; then it poisons.
  std::uint32_t acknowledgement_deadline_ticks = 10;
};

// Whether the phase ends its transaction: all ok on the last phase commits.
// On a last phase held for confirmation, the commit waits until confirm():
// a step the coordinator began before its caller asked for it (a chained
// decode step, docs/protocol.md "Chained steps").
enum class PhasePosition { intermediate, last, last_on_confirmation };

// A message the coordinator must send to rank `to`.
struct CoordinatorMessage {
  // A constructor rather than an aggregate: clang 14 (the fuzz build) has
  // no parenthesised aggregate initialisation for emplace_back.
  CoordinatorMessage(RankId recipient, RankInstruction content) : to(recipient), message(std::move(content)) {}

  RankId to = kNoRank;
  RankInstruction message;

  bool operator==(const CoordinatorMessage&) const = default;
};

struct CoordinatorReady {
  // To send, in this order.
  std::vector<CoordinatorMessage> messages;
  // How each phase ended, for the caller, in order: proceed and commit when
  // every status is in; abort only once every rank acknowledged that it
  // restored (the abort message went out earlier); poison when decided.
  std::vector<PhaseDecision> settled;
};

class CoordinatorAgreement {
 public:
  CoordinatorAgreement(SessionId session, RankId rank_count, AgreementOptions options = {});

  // Starts the agreement on `phase` of transaction `epoch`. A transaction's
  // first phase needs an epoch above every earlier one (epochs start at 1);
  // its next phases keep the epoch and may begin once the previous one
  // proceeded. Refused without any message: while a phase is being agreed
  // on or a transaction is still open (ErrorCode::contract), and when the
  // session is poisoned (ErrorCode::commit_indeterminate, naming the cause).
  // `riders` begin with the phase; `position` is the last rider's, the
  // others are intermediate.
  Status begin(Epoch epoch, PhaseId phase, PhasePosition position, PhaseArguments arguments = {},
               std::vector<Rider> riders = {});

  // Starts a reset transaction: its first phase, SessionResetPreparation;
  // continue it with begin() and the same epoch. Allowed while poisoned;
  // its commit clears the poison. Refused (ErrorCode::state) while a rank
  // is down: a reset needs the complete topology.
  // `position` is the round's last phase's, as for begin().
  Status begin_reset(Epoch epoch, PhaseArguments arguments = {}, std::vector<Rider> riders = {},
                     PhasePosition position = PhasePosition::intermediate);

  void step(const PhaseStatus& status);
  void step(const AbortAcknowledgement& acknowledgement);
  // The caller takes the open transaction begun with a last phase held for
  // confirmation: its commit goes out once every status is in (at once if
  // they are). Ignored when no such transaction is open.
  void confirm();
  // The caller does not take it: it aborts as on a failure
  // (CauseKind::withdrawn), every rank restores and acknowledges. Ignored
  // when no such transaction is open or its abort already started.
  void withdraw();
  // One unit of time; deadlines are counted in ticks.
  void tick();
  // New deadlines, from the next tick on (a deadline running keeps the
  // ticks it has counted).
  void set_deadlines(AgreementOptions options) { options_ = options; }
  // The rank is gone (its actor exited, its node disconnected): poisons the
  // session. Ranks outside the topology are ignored.
  void rank_down(RankId rank);
  // The rank is reachable again; a reset can then succeed.
  void rank_up(RankId rank);
  // Whether the rank was reported down and not up again since.
  bool is_down(RankId rank) const { return rank < down_.size() && down_[rank]; }

  // Takes the messages to send and the decisions settled since the last call.
  CoordinatorReady take_ready() {
    CoordinatorReady ready;
    take_ready(ready);
    return ready;
  }
  // The same into `ready`, reusing its buffers (RankAgreement::take_ready).
  void take_ready(CoordinatorReady& ready);

  // True while a phase waits for statuses or acknowledgements. A commit
  // held for confirmation waits for no rank, so it has no deadline.
  bool agreeing() const { return stage_ == Stage::collecting_statuses || stage_ == Stage::collecting_acknowledgements; }
  bool poisoned() const { return poison_.has_value(); }
  // The decision that poisoned the session, while it is poisoned.
  const std::optional<PhaseDecision>& poison() const { return poison_; }
  const DroppedMessages& dropped() const { return dropped_; }
  RankId rank_count() const { return rank_count_; }

 private:
  enum class Stage { idle, collecting_statuses, collecting_acknowledgements, awaiting_confirmation };
  struct OpenTransaction {
    Epoch epoch = 0;
    bool is_reset = false;
    bool confirmed = false;  // for a last phase held for confirmation
  };

  Status check_can_open(Epoch epoch) const;
  void start_round(Epoch epoch, PhaseId phase, PhasePosition position, PhaseArguments arguments,
                   std::vector<Rider> riders);
  void record_early_status(std::size_t index, const PhaseStatus& status);
  bool held_for_confirmation() const;
  std::optional<std::size_t> index_in_round(const PhaseId& phase) const;
  bool accept_reply(SessionId session, Epoch epoch, RankId rank);
  bool record_answer(RankId rank);
  void decide_success();
  void start_abort(DecisionCause cause);
  void settle_abort();
  void decide_poison(DecisionCause cause);
  void send_decision_to_reachable_ranks(const PhaseDecision& decision);
  PhaseDecision decision(Decision kind, DecisionCause cause) const;
  RankId first_unanswered_rank() const;

  SessionId session_;
  RankId rank_count_;
  AgreementOptions options_;

  Stage stage_ = Stage::idle;
  std::optional<OpenTransaction> open_;                   // begun, neither committed, aborted nor poisoned
  Epoch epoch_ = 0;                                       // the newest transaction begun
  PhaseId phase_;                                         // the phase being agreed on
  PhasePosition position_ = PhasePosition::intermediate;  // the round's last phase's
  std::vector<PhaseId> round_;                            // the phase begun, then its riders
  std::size_t current_ = 0;                               // phase_'s index in round_
  // Per rider (index in round_), per rank: its ok status came before its turn.
  std::vector<std::vector<bool>> early_;
  std::vector<bool> answered_;  // per rank, in the current stage
  RankId unanswered_ = 0;
  std::uint32_t ticks_in_stage_ = 0;
  DecisionCause abort_cause_;

  std::vector<bool> down_;  // per rank
  std::optional<PhaseDecision> poison_;
  DroppedMessages dropped_;
  CoordinatorReady ready_;
};

}  // namespace accord
