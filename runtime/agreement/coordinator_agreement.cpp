#include "runtime/agreement/coordinator_agreement.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "runtime/base/assert.hpp"

namespace accord {

CoordinatorAgreement::CoordinatorAgreement(SessionId session, RankId rank_count, AgreementOptions options)
    : session_(session), rank_count_(rank_count), options_(options), down_(rank_count, false) {
  ACCORD_ASSERT(rank_count > 0, "a session has at least one rank");
}

Status CoordinatorAgreement::begin(Epoch epoch, PhaseId phase, PhasePosition position, PhaseArguments arguments,
                                   std::vector<Rider> riders) {
  if (stage_ != Stage::idle) {
    return Error(ErrorCode::contract,
                 "phase " + to_string(phase_) + " of epoch " + std::to_string(epoch_) + " is still being agreed on");
  }
  const bool continues_open_transaction = open_ && open_->epoch == epoch;
  if (!continues_open_transaction) {
    if (Status s = check_can_open(epoch); !s) return s;
    open_ = OpenTransaction{epoch, false};
  }
  start_round(epoch, phase, position, std::move(arguments), std::move(riders));
  return {};
}

Status CoordinatorAgreement::begin_reset(Epoch epoch, PhaseArguments arguments, std::vector<Rider> riders,
                                         PhasePosition position) {
  if (stage_ != Stage::idle) {
    return Error(ErrorCode::contract, "cannot reset while phase " + to_string(phase_) + " of epoch " +
                                          std::to_string(epoch_) + " is being agreed on");
  }
  if (epoch <= epoch_) {
    return Error(ErrorCode::contract,
                 "epoch " + std::to_string(epoch) + " does not follow epoch " + std::to_string(epoch_));
  }
  const auto down = std::find(down_.begin(), down_.end(), true);
  if (down != down_.end()) {
    return Error(ErrorCode::state, "cannot reset: rank " + std::to_string(down - down_.begin()) + " is down");
  }
  // A reset supersedes a transaction left open: it replaces the state anyway.
  open_ = OpenTransaction{epoch, true};
  start_round(epoch, phase_id(DistributedExecutionPhase::SessionResetPreparation), position, std::move(arguments),
              std::move(riders));
  return {};
}

Status CoordinatorAgreement::check_can_open(Epoch epoch) const {
  if (poison_) return Error(ErrorCode::commit_indeterminate, "session poisoned: " + describe(*poison_));
  if (open_) {
    return Error(ErrorCode::contract,
                 "transaction " + std::to_string(open_->epoch) + " is still open: end it with its last phase");
  }
  if (epoch <= epoch_) {
    return Error(ErrorCode::contract,
                 "epoch " + std::to_string(epoch) + " does not follow epoch " + std::to_string(epoch_));
  }
  return {};
}

void CoordinatorAgreement::start_round(Epoch epoch, PhaseId phase, PhasePosition position, PhaseArguments arguments,
                                       std::vector<Rider> riders) {
  ACCORD_ASSERT(epoch >= epoch_, "epochs only grow: a round begins in the newest epoch or a later one");
  ACCORD_ASSERT(open_ && open_->epoch == epoch, "a round belongs to the open transaction, in its epoch");
  stage_ = Stage::collecting_statuses;
  epoch_ = epoch;
  phase_ = phase;
  position_ = position;
  round_.assign(1, phase);
  for (const Rider& rider : riders) round_.push_back(rider.phase);
  current_ = 0;
  early_.assign(round_.size(), std::vector<bool>(rank_count_, false));
  answered_.assign(rank_count_, false);
  unanswered_ = rank_count_;
  ticks_in_stage_ = 0;
  // Every rank is up here: a down rank poisons, and only a reset, which
  // needs every rank, opens a transaction while poisoned.
  PhaseBegin begin{session_, epoch, phase, std::move(arguments), std::move(riders)};
  for (RankId rank = 0; rank + 1 < rank_count_; ++rank) ready_.messages.emplace_back(rank, begin);
  if (rank_count_ > 0) ready_.messages.emplace_back(rank_count_ - 1, std::move(begin));  // a copy fewer
}

// Where `phase` is in the round, from the phase being agreed on.
std::optional<std::size_t> CoordinatorAgreement::index_in_round(const PhaseId& phase) const {
  for (std::size_t i = current_; i < round_.size(); ++i) {
    if (round_[i] == phase) return i;
  }
  return std::nullopt;
}

void CoordinatorAgreement::step(const PhaseStatus& status) {
  if (!accept_reply(status.session, status.epoch, status.rank)) return;
  const auto index = stage_ == Stage::collecting_statuses ? index_in_round(status.phase) : std::nullopt;
  if (!index) {
    dropped_.count(DropReason::late);
    return;
  }
  if (*index > current_) return record_early_status(*index, status);
  if (!record_answer(status.rank)) return;
  if (!status.ok) {
    start_abort({CauseKind::rank_error, status.rank, status.error_code, status.error_message});
  } else if (unanswered_ == 0) {
    decide_success();
  }
}

void CoordinatorAgreement::step(const AbortAcknowledgement& acknowledgement) {
  if (!accept_reply(acknowledgement.session, acknowledgement.epoch, acknowledgement.rank)) return;
  if (stage_ != Stage::collecting_acknowledgements) {
    dropped_.count(DropReason::late);
    return;
  }
  if (!record_answer(acknowledgement.rank)) return;
  if (!acknowledgement.restored) {
    decide_poison({CauseKind::restore_failed, acknowledgement.rank, FailureCode::state, acknowledgement.error_message});
  } else if (unanswered_ == 0) {
    settle_abort();
  }
}

// A rider's status before its turn: an ok is kept for then; an error
// aborts now, naming the rider.
void CoordinatorAgreement::record_early_status(std::size_t index, const PhaseStatus& status) {
  ACCORD_ASSERT(index > current_ && index < round_.size(), "an early status is for a rider after the current phase");
  auto&& seen = early_[index][status.rank];
  if (seen) {
    dropped_.count(DropReason::duplicate);
    return;
  }
  seen = true;
  if (status.ok) return;
  phase_ = status.phase;
  start_abort({CauseKind::rank_error, status.rank, status.error_code, status.error_message});
}

bool CoordinatorAgreement::accept_reply(SessionId session, Epoch epoch, RankId rank) {
  std::optional<DropReason> reason;
  if (session != session_) {
    reason = DropReason::other_session;
  } else if (rank >= rank_count_) {
    reason = DropReason::unknown_rank;
  } else if (down_[rank]) {
    reason = DropReason::rank_down;
  } else if (epoch < epoch_) {
    reason = DropReason::stale_epoch;
  } else if (epoch > epoch_) {
    reason = DropReason::future_epoch;
  }
  if (reason) dropped_.count(*reason);
  return !reason;
}

// Marks the rank's answer in the current stage; false for a second one.
bool CoordinatorAgreement::record_answer(RankId rank) {
  ACCORD_ASSERT(rank < rank_count_, "an answer counted is from a rank of the session (accept_reply checked it)");
  if (answered_[rank]) {
    dropped_.count(DropReason::duplicate);
    return false;
  }
  answered_[rank] = true;
  ACCORD_ASSERT(unanswered_ > 0, "each rank's answer is counted once a stage");
  --unanswered_;
  return true;
}

bool CoordinatorAgreement::held_for_confirmation() const {
  return open_ && !open_->confirmed && position_ == PhasePosition::last_on_confirmation &&
         (stage_ == Stage::collecting_statuses || stage_ == Stage::awaiting_confirmation);
}

void CoordinatorAgreement::confirm() {
  if (!held_for_confirmation()) return;
  open_->confirmed = true;
  if (stage_ != Stage::awaiting_confirmation) return;
  stage_ = Stage::collecting_statuses;
  decide_success();
}

void CoordinatorAgreement::withdraw() {
  if (!held_for_confirmation()) return;
  // An abort names a phase: the one being agreed on, or Commit, whose
  // statuses are all in.
  start_abort({CauseKind::withdrawn, kNoRank, FailureCode::mechanism, {}});
}

void CoordinatorAgreement::tick() {
  if (!agreeing()) return;
  ++ticks_in_stage_;
  if (stage_ == Stage::collecting_statuses && ticks_in_stage_ >= options_.status_deadline_ticks) {
    start_abort({CauseKind::status_timeout, first_unanswered_rank(), FailureCode::mechanism, {}});
  } else if (stage_ == Stage::collecting_acknowledgements &&
             ticks_in_stage_ >= options_.acknowledgement_deadline_ticks) {
    decide_poison({CauseKind::acknowledgement_timeout, first_unanswered_rank(), FailureCode::mechanism, {}});
  }
}

void CoordinatorAgreement::rank_down(RankId rank) {
  if (rank >= rank_count_ || down_[rank]) return;
  down_[rank] = true;
  // Already poisoned with nothing in flight: no rank has anything to stop.
  if (poison_ && stage_ == Stage::idle && !open_) return;
  decide_poison({CauseKind::rank_down, rank, FailureCode::mechanism, {}});
}

void CoordinatorAgreement::rank_up(RankId rank) {
  if (rank < rank_count_) down_[rank] = false;
}

void CoordinatorAgreement::take_ready(CoordinatorReady& ready) {
  ready.messages.clear();
  ready.settled.clear();
  std::swap(ready, ready_);
}

void CoordinatorAgreement::decide_success() {
  ACCORD_ASSERT(stage_ == Stage::collecting_statuses && unanswered_ == 0,
                "a phase succeeds only while statuses are collected, once every rank's is in");
  ACCORD_ASSERT(current_ < round_.size() && phase_ == round_[current_],
                "the phase decided is the round's current one: phases are decided in order");
  ACCORD_ASSERT(open_.has_value(), "a phase is decided inside an open transaction");
  const bool round_ends = current_ + 1 == round_.size();
  const bool commit = round_ends && position_ != PhasePosition::intermediate;
  if (commit && position_ == PhasePosition::last_on_confirmation && !open_->confirmed) {
    stage_ = Stage::awaiting_confirmation;
    return;
  }
  const PhaseDecision success = decision(commit ? Decision::commit : Decision::proceed, {});
  send_decision_to_reachable_ranks(success);
  ready_.settled.push_back(success);
  if (!round_ends) {
    // The next rider's turn, with the statuses that came early.
    phase_ = round_[++current_];
    ticks_in_stage_ = 0;
    answered_ = early_[current_];
    unanswered_ = static_cast<RankId>(std::count(answered_.begin(), answered_.end(), false));
    if (unanswered_ == 0) decide_success();
    return;
  }
  stage_ = Stage::idle;
  if (!commit) return;
  if (open_->is_reset) poison_.reset();
  open_.reset();
}

void CoordinatorAgreement::start_abort(DecisionCause cause) {
  ACCORD_ASSERT(stage_ == Stage::collecting_statuses || stage_ == Stage::awaiting_confirmation,
                "an abort starts only while a phase awaits statuses or its commit's confirmation");
  send_decision_to_reachable_ranks(decision(Decision::abort, cause));
  abort_cause_ = std::move(cause);
  stage_ = Stage::collecting_acknowledgements;
  answered_.assign(rank_count_, false);
  unanswered_ = rank_count_;
  ticks_in_stage_ = 0;
}

void CoordinatorAgreement::settle_abort() {
  ACCORD_ASSERT(stage_ == Stage::collecting_acknowledgements && unanswered_ == 0,
                "an abort settles only once every rank acknowledged it");
  ready_.settled.push_back(decision(Decision::abort, abort_cause_));
  stage_ = Stage::idle;
  open_.reset();
}

void CoordinatorAgreement::decide_poison(DecisionCause cause) {
  const PhaseDecision poison = decision(Decision::poison, std::move(cause));
  send_decision_to_reachable_ranks(poison);
  ready_.settled.push_back(poison);
  // The first cause stays: it is why the session cannot be trusted.
  if (!poison_) poison_ = poison;
  stage_ = Stage::idle;
  open_.reset();
}

void CoordinatorAgreement::send_decision_to_reachable_ranks(const PhaseDecision& decision) {
  for (RankId rank = 0; rank < rank_count_; ++rank) {
    if (!down_[rank]) ready_.messages.emplace_back(rank, decision);
  }
}

PhaseDecision CoordinatorAgreement::decision(Decision kind, DecisionCause cause) const {
  return PhaseDecision{session_, epoch_, phase_, kind, std::move(cause)};
}

RankId CoordinatorAgreement::first_unanswered_rank() const {
  const auto it = std::find(answered_.begin(), answered_.end(), false);
  return static_cast<RankId>(it - answered_.begin());
}

}  // namespace accord
