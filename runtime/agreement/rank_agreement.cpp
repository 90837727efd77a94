#include "runtime/agreement/rank_agreement.hpp"

#include <algorithm>
#include <utility>

#include "runtime/base/assert.hpp"

namespace accord {

RankAgreement::RankAgreement(SessionId session, RankId rank) : session_(session), rank_(rank) {}

void RankAgreement::step(const PhaseBegin& begin) {
  if (begin.session != session_) {
    dropped_.count(DropReason::other_session);
  } else if (begin.epoch < epoch_) {
    dropped_.count(DropReason::stale_epoch);
  } else if (begin.epoch > epoch_ && work_in_flight_) {
    // Only a reset opens a transaction before the previous one settled
    // (after a poison, say); it begins once the local work that still runs
    // has stopped touching the state.
    deferred_begin_ = begin;
  } else if (begin.epoch > epoch_) {
    open_transaction(begin);
  } else if (std::find(round_.begin(), round_.end(), begin.phase) != round_.end()) {
    dropped_.count(DropReason::duplicate);
  } else if (stage_ == Stage::between_phases) {
    run(begin);
  } else {
    dropped_.count(DropReason::out_of_order);
  }
}

void RankAgreement::open_transaction(const PhaseBegin& begin) {
  ACCORD_ASSERT(begin.epoch > epoch_, "epochs only grow on a rank: a transaction opens with a newer epoch");
  ACCORD_ASSERT(!work_in_flight_, "a transaction opens only once the local work in flight has stopped");
  const bool is_reset = begin.phase.phase == DistributedExecutionPhase::SessionResetPreparation;
  // The coordinator opens a new epoch only after every rank settled the
  // previous one; a rank that did not has missed a decision. Only a reset,
  // which replaces the state, may skip over it.
  if (stage_ != Stage::settled && !is_reset && !poison_) {
    become_poisoned(own_poison(
        {CauseKind::rank_error, rank_, FailureCode::state, "epoch " + std::to_string(epoch_) + " was never settled"}));
  }
  epoch_ = begin.epoch;
  in_reset_ = is_reset;
  if (poison_ && !is_reset) {
    refuse(begin);
  } else {
    run(begin);
  }
}

void RankAgreement::start_round(const PhaseBegin& begin) {
  round_.assign(1, begin.phase);
  rider_arguments_.clear();
  for (const Rider& rider : begin.riders) {
    round_.push_back(rider.phase);
    rider_arguments_.push_back(rider.arguments);
  }
  reported_ok_ = 0;
  decided_ = 0;
  next_rider_ = 1;
  closed_ = false;
  abort_requested_ = false;
  phase_ = begin.phase;
}

void RankAgreement::run(const PhaseBegin& begin) {
  start_round(begin);
  start_work(begin.phase, begin.arguments);
}

void RankAgreement::start_work(const PhaseId& phase, PhaseArguments arguments) {
  ACCORD_ASSERT(!work_in_flight_, "a rank runs one phase's local work at a time");
  stage_ = Stage::working;
  work_in_flight_ = true;
  phase_ = phase;
  ready_.actions.push_back(RunPhase{epoch_, phase, std::move(arguments)});
}

// A poisoned rank does no work: it answers at once with an error.
void RankAgreement::refuse(const PhaseBegin& begin) {
  ACCORD_ASSERT(poison_.has_value(), "only a poisoned rank refuses a phase");
  start_round(begin);
  stage_ = Stage::awaiting_decision;
  ready_.messages.push_back(PhaseStatus{session_, begin.epoch, begin.phase, rank_, false, FailureCode::state,
                                        "rank " + std::to_string(rank_) + " is poisoned: " + describe(*poison_)});
}

void RankAgreement::phase_done(Epoch epoch, const PhaseId& phase) {
  report_local_result(epoch, phase, true, FailureCode::mechanism, {});
}

void RankAgreement::phase_failed(Epoch epoch, const PhaseId& phase, FailureCode code, std::string message) {
  report_local_result(epoch, phase, false, code, std::move(message));
}

void RankAgreement::report_local_result(Epoch epoch, const PhaseId& phase, bool ok, FailureCode code,
                                        std::string message) {
  if (!work_in_flight_ || epoch != epoch_ || phase != phase_) {
    dropped_.count(DropReason::late);
    return;
  }
  work_in_flight_ = false;
  if (stage_ != Stage::working || deferred_begin_) {
    // Poisoned, or superseded by a reset, while the work ran: its result
    // no longer matters. The rank forgets a poisoned transaction now, and
    // a transaction that began meanwhile starts.
    dropped_.count(DropReason::late);
    if (poison_ && stage_ != Stage::working) ready_.actions.push_back(MarkPoisoned{*poison_});
    if (auto deferred = std::exchange(deferred_begin_, std::nullopt)) step(*deferred);
    return;
  }
  if (abort_requested_) {
    // The abort came while the work ran: its status no longer matters.
    stage_ = Stage::restoring;
    ready_.actions.push_back(RestoreCheckpoint{epoch_});
    return;
  }
  ready_.messages.push_back(PhaseStatus{session_, epoch, phase, rank_, ok, code, std::move(message)});
  if (ok) ++reported_ok_;
  ACCORD_ASSERT(reported_ok_ <= round_.size() && next_rider_ <= round_.size(),
                "a rank reports no more phases than its round holds");
  if (ok && next_rider_ < round_.size()) {
    const std::size_t rider = next_rider_++;
    start_work(round_[rider], std::move(rider_arguments_[rider - 1]));
  } else {
    next_rider_ = round_.size();  // a failed phase ends the round's work
    stage_ = Stage::awaiting_decision;
  }
}

void RankAgreement::step(const PhaseDecision& decision) {
  if (decision.session != session_) {
    dropped_.count(DropReason::other_session);
    return;
  }
  if (decision.epoch != epoch_) {
    dropped_.count(decision.epoch < epoch_ ? DropReason::stale_epoch : DropReason::future_epoch);
    return;
  }
  switch (decision.decision) {
    case Decision::poison:
      // Poison concerns the whole session, whatever phase it names; on a
      // rank already poisoned it still ends a reset in progress.
      if (poison_ && stage_ == Stage::settled) {
        dropped_.count(DropReason::duplicate);
      } else {
        become_poisoned(decision);
      }
      return;
    case Decision::proceed:
    case Decision::commit:
    case Decision::abort: apply_decision(decision); return;
  }
  dropped_.count(DropReason::malformed);
}

void RankAgreement::apply_decision(const PhaseDecision& decision) {
  const auto found = std::find(round_.begin(), round_.end(), decision.phase);
  if (found == round_.end()) {
    dropped_.count(DropReason::late);
    return;
  }
  const auto index = static_cast<std::size_t>(found - round_.begin());
  if (closed_ || index < decided_) {
    dropped_.count(DropReason::duplicate);
    return;
  }
  if (decision.decision == Decision::abort) {
    if (stage_ != Stage::working && stage_ != Stage::awaiting_decision) {
      dropped_.count(DropReason::out_of_order);
      return;
    }
    closed_ = true;
    apply_abort();
    return;
  }
  apply_success(decision, index);
}

// Proceed or commit: the round's phases are decided in order, each only
// after this rank reported it ok.
void RankAgreement::apply_success(const PhaseDecision& decision, std::size_t index) {
  const bool commit = decision.decision == Decision::commit;
  const bool in_turn = index == decided_ && index < reported_ok_ && (!poison_ || in_reset_);
  if (!in_turn || (commit && index + 1 != round_.size())) {
    dropped_.count(DropReason::out_of_order);
    return;
  }
  ++decided_;
  ACCORD_ASSERT(decided_ <= reported_ok_, "a phase is decided only after this rank reported it ok");
  if (!commit) {
    if (decided_ == round_.size()) stage_ = Stage::between_phases;
    return;
  }
  ACCORD_ASSERT(!work_in_flight_ && decided_ == round_.size(),
                "a commit comes after every phase of the round ran and was decided, with no work in flight");
  closed_ = true;
  stage_ = Stage::settled;
  ready_.actions.push_back(CommitTransaction{epoch_});
  if (in_reset_) poison_.reset();
}

void RankAgreement::apply_abort() {
  ACCORD_ASSERT(stage_ == Stage::working || stage_ == Stage::awaiting_decision,
                "an abort applies only to a phase that runs or awaits its decision");
  if (stage_ == Stage::working) {
    abort_requested_ = true;  // restore once the work has stopped touching the state
  } else if (poison_ && !in_reset_) {
    // Refused the phase, changed nothing, but its state is not trustworthy.
    stage_ = Stage::settled;
    ready_.messages.push_back(
        AbortAcknowledgement{session_, epoch_, rank_, false, "rank " + std::to_string(rank_) + " is poisoned"});
  } else {
    ACCORD_ASSERT(!work_in_flight_, "a restore never runs under local work in flight");
    stage_ = Stage::restoring;
    ready_.actions.push_back(RestoreCheckpoint{epoch_});
  }
}

void RankAgreement::restored(Epoch epoch) { finish_restore(epoch, true, {}); }

void RankAgreement::restore_failed(Epoch epoch, std::string message) {
  finish_restore(epoch, false, std::move(message));
}

void RankAgreement::finish_restore(Epoch epoch, bool ok, std::string message) {
  if (stage_ != Stage::restoring || epoch != epoch_) {
    dropped_.count(DropReason::late);
    return;
  }
  stage_ = Stage::settled;
  ready_.messages.push_back(AbortAcknowledgement{session_, epoch, rank_, ok, message});
  if (!ok) become_poisoned(own_poison({CauseKind::restore_failed, rank_, FailureCode::state, std::move(message)}));
}

// The first cause stays: it is why the rank's state cannot be trusted.
void RankAgreement::become_poisoned(PhaseDecision cause) {
  if (!poison_) poison_ = cause;
  stage_ = Stage::settled;
  closed_ = true;
  next_rider_ = round_.size();
  in_reset_ = false;
  // Local work that still runs would race the rank's forgetting of the
  // transaction; it is forgotten when the work's result comes back.
  if (!work_in_flight_) ready_.actions.push_back(MarkPoisoned{std::move(cause)});
}

PhaseDecision RankAgreement::own_poison(DecisionCause cause) const {
  return PhaseDecision{session_, epoch_, phase_, Decision::poison, std::move(cause)};
}

void RankAgreement::take_ready(RankReady& ready) {
  ready.messages.clear();
  ready.actions.clear();
  std::swap(ready, ready_);
}

}  // namespace accord
