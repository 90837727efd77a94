#include "runtime/agreement/rank_agreement.hpp"

#include <utility>

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
  } else if (begin.phase == phase_) {
    dropped_.count(DropReason::duplicate);
  } else if (stage_ == Stage::between_phases) {
    run(begin);
  } else {
    dropped_.count(DropReason::out_of_order);
  }
}

void RankAgreement::open_transaction(const PhaseBegin& begin) {
  const bool is_reset = begin.phase.phase == DistributedExecutionPhase::SessionResetPreparation;
  // The coordinator opens a new epoch only after every rank settled the
  // previous one; a rank that did not has missed a decision. Only a reset,
  // which replaces the state, may skip over it.
  if (stage_ != Stage::settled && !is_reset && !poison_) {
    become_poisoned(own_poison({CauseKind::rank_error, rank_, FailureCode::state,
                                "epoch " + std::to_string(epoch_) + " was never settled"}));
  }
  epoch_ = begin.epoch;
  in_reset_ = is_reset;
  if (poison_ && !is_reset) {
    refuse(begin);
  } else {
    run(begin);
  }
}

void RankAgreement::run(const PhaseBegin& begin) {
  stage_ = Stage::working;
  work_in_flight_ = true;
  phase_ = begin.phase;
  decided_ = false;
  abort_requested_ = false;
  ready_.actions.push_back(RunPhase{begin.epoch, begin.phase, begin.arguments});
}

// A poisoned rank does no work: it answers at once with an error.
void RankAgreement::refuse(const PhaseBegin& begin) {
  stage_ = Stage::awaiting_decision;
  phase_ = begin.phase;
  decided_ = false;
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
  stage_ = Stage::awaiting_decision;
  ready_.messages.push_back(PhaseStatus{session_, epoch, phase, rank_, ok, code, std::move(message)});
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
    case Decision::abort:
      apply_decision(decision);
      return;
  }
  dropped_.count(DropReason::malformed);
}

void RankAgreement::apply_decision(const PhaseDecision& decision) {
  if (decision.phase != phase_) {
    dropped_.count(DropReason::late);
    return;
  }
  if (decided_) {
    dropped_.count(DropReason::duplicate);
    return;
  }
  const bool is_abort = decision.decision == Decision::abort;
  const bool may_succeed = stage_ == Stage::awaiting_decision && (!poison_ || in_reset_);
  const bool may_abort = stage_ == Stage::working || stage_ == Stage::awaiting_decision;
  if (is_abort ? !may_abort : !may_succeed) {
    dropped_.count(DropReason::out_of_order);
    return;
  }
  decided_ = true;
  if (is_abort) {
    apply_abort();
  } else if (decision.decision == Decision::proceed) {
    stage_ = Stage::between_phases;
  } else {
    stage_ = Stage::settled;
    ready_.actions.push_back(CommitTransaction{epoch_});
    if (in_reset_) poison_.reset();
  }
}

void RankAgreement::apply_abort() {
  if (stage_ == Stage::working) {
    abort_requested_ = true;  // restore once the work has stopped touching the state
  } else if (poison_ && !in_reset_) {
    // Refused the phase, changed nothing, but its state is not trustworthy.
    stage_ = Stage::settled;
    ready_.messages.push_back(AbortAcknowledgement{session_, epoch_, rank_, false,
                                                   "rank " + std::to_string(rank_) + " is poisoned"});
  } else {
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
  decided_ = true;
  in_reset_ = false;
  // Local work that still runs would race the rank's forgetting of the
  // transaction; it is forgotten when the work's result comes back.
  if (!work_in_flight_) ready_.actions.push_back(MarkPoisoned{std::move(cause)});
}

PhaseDecision RankAgreement::own_poison(DecisionCause cause) const {
  return PhaseDecision{session_, epoch_, phase_, Decision::poison, std::move(cause)};
}

RankReady RankAgreement::take_ready() { return std::exchange(ready_, {}); }

}  // namespace accord
