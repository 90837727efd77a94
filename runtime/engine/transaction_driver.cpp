#include "runtime/engine/transaction_driver.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

#include "runtime/base/assert.hpp"

namespace accord {

namespace {

using enum DistributedExecutionPhase;

// The reply says the session is poisoned by `poison`, in words and as fields.
void record_poison(TransactionReply& reply, const PhaseDecision& poison) {
  reply.poison_cause = describe(poison);
  reply.poison_rank = poison.cause.rank;
  reply.poison_phase = to_string(poison.phase);
  reply.poison_epoch = poison.epoch;
  reply.message = "the session is poisoned: " + reply.poison_cause;
}

}  // namespace

TransactionDriver::TransactionDriver(SessionId session, SessionRanks ranks, AgreementOptions options)
    : agreement_(session, ranks.ranks, options),
      session_(session),
      rank_count_(ranks.ranks),
      expert_ranks_(ranks.expert_ranks) {}

std::optional<TransactionReply> TransactionDriver::start(const TransactionRequest& request) {
  if (unclaimed_ || (busy_ && caller_ == Caller::not_yet)) {
    meet_chained_step(request);
    return std::nullopt;
  }
  if (busy_) {
    TransactionReply refused;
    refused.outcome = TransactionOutcome::refused;
    refused.message = "the session is running another transaction";
    return refused;
  }
  run(request);
  return std::nullopt;
}

void TransactionDriver::open(const TransactionRequest& request, Caller caller) {
  ACCORD_ASSERT(!busy_, "a transaction opens only when none is open");
  busy_ = true;
  caller_ = caller;
  request_ = request;
  plan_ = plan_transaction(request, {rank_count_, expert_ranks_});
  next_round_ = 0;
  load_.reset();
  if (const auto* load = std::get_if<PromptCacheLoadRequest>(&request.operation)) load_ = load->arguments;
  first_rank_save_id_.clear();
  reply_ = {};
  reply_.epoch = next_epoch_++;
  begin_next();
}

// The caller's request meets a chained step, running or ended: one that
// asks for it takes it; anything else withdraws a running one first.
void TransactionDriver::meet_chained_step(const TransactionRequest& request) {
  std::optional<TransactionReply> ended = std::exchange(unclaimed_, std::nullopt);
  const bool asked = asks_for_chained_step(request, request_);
  if (!asked && !ended) {
    ACCORD_ASSERT(busy_ && caller_ == Caller::not_yet, "only a chained step that runs unclaimed is withdrawn");
    caller_ = Caller::gone;
    after_withdrawal_ = request;
    agreement_.withdraw();
    return;
  }
  caller_ = Caller::waiting;
  if (!asked) return run(request);  // it ended already: nothing to undo
  std::get<ForwardStepRequest>(request_.operation).chain_next =
      std::get<ForwardStepRequest>(request.operation).chain_next;
  if (ended) {
    deliver(std::move(*ended));
  } else {
    agreement_.confirm();
  }
}

// Runs a request its caller waits for. An end_chain finds nothing left to
// end: it commits, unless the session is poisoned (a withdrawn step that
// could not be undone).
void TransactionDriver::run(const TransactionRequest& request) {
  if (request.kind() != TransactionKind::end_chain) return open(request, Caller::waiting);
  TransactionReply reply;
  reply.epoch = next_epoch_ - 1;  // the newest transaction's: a poison's record names no later one
  if (agreement_.poisoned()) {
    reply.outcome = TransactionOutcome::poisoned;
    record_poison(reply, *agreement_.poison());
  }
  ready_.reply = std::move(reply);
}

// Begins the next planned round of the open transaction.
void TransactionDriver::begin_next() {
  ACCORD_ASSERT(busy_ && next_round_ < plan_.size(),
                "a round begins only in an open transaction whose plan has one left: phases run in the plan's order");
  PlannedRound& round = plan_[next_round_];
  if (round.phase.phase == PromptCacheLoadPreparation) {
    // Every rank must load a generation of the same save: rank 0's. A rank
    // whose live generation belongs to another save (a concurrent writer,
    // or ranks left from two saves) refuses, and the load aborts.
    ACCORD_ASSERT(load_.has_value(), "a load's preparation runs only in a prompt-cache load");
    load_->save_id = first_rank_save_id_;
    round.arguments = *load_;
  }
  const auto last = caller_ == Caller::not_yet ? PhasePosition::last_on_confirmation : PhasePosition::last;
  const auto position = next_round_ + 1 == plan_.size() ? last : PhasePosition::intermediate;
  ++next_round_;
  reply_.phases_run += 1 + round.riders.size();
  round_end_ = round.riders.empty() ? round.phase : round.riders.back().phase;
  Status begun =
      next_round_ == 1 && round.phase.phase == SessionResetPreparation
          ? agreement_.begin_reset(reply_.epoch, std::move(round.arguments), std::move(round.riders), position)
          : agreement_.begin(reply_.epoch, round.phase, position, std::move(round.arguments), std::move(round.riders));
  if (!begun) {
    reply_.message = begun.error().message();
    const bool poisoned = agreement_.poisoned();
    if (poisoned) record_poison(reply_, *agreement_.poison());
    finish(poisoned ? TransactionOutcome::poisoned : TransactionOutcome::refused, nullptr);
  }
}

void TransactionDriver::settle(const PhaseDecision& decision) {
  if (!current(decision.epoch)) return;  // a poison between transactions
  switch (decision.decision) {
    case Decision::proceed:
      // A round's phases proceed one by one; the next round begins after
      // its last.
      if (decision.phase == round_end_) begin_next();
      break;
    case Decision::commit:
      ACCORD_ASSERT(next_round_ == plan_.size() && decision.phase == round_end_,
                    "a commit decides the plan's last phase: every round ran, in order");
      finish(TransactionOutcome::committed, nullptr);
      break;
    case Decision::abort: finish(TransactionOutcome::aborted, &decision); break;
    case Decision::poison: finish(TransactionOutcome::poisoned, &decision); break;
  }
}

void TransactionDriver::finish(TransactionOutcome outcome, const PhaseDecision* decision) {
  ACCORD_ASSERT(busy_, "only an open transaction finishes");
  reply_.outcome = outcome;
  if (decision != nullptr) {
    reply_.phase = to_string(decision->phase);
    reply_.error_code =
        decision->cause.kind == CauseKind::rank_error ? decision->cause.error_code : FailureCode::mechanism;
    reply_.message = describe(*decision);
    if (outcome == TransactionOutcome::poisoned) record_poison(reply_, *decision);
  }
  busy_ = false;
  deliver(std::exchange(reply_, {}));
}

// Hands a finished transaction's reply to whoever waits for it, and opens
// the chained step where its commit asks for one.
void TransactionDriver::deliver(TransactionReply reply) {
  switch (caller_) {
    case Caller::not_yet: unclaimed_ = std::move(reply); return;
    case Caller::gone: {
      ACCORD_ASSERT(after_withdrawal_.has_value(), "a withdrawn chained step leaves the request that withdrew it");
      caller_ = Caller::waiting;
      run(*std::exchange(after_withdrawal_, std::nullopt));
      return;
    }
    case Caller::waiting: break;
  }
  std::optional<TransactionRequest> next = chained_step(request_, reply);
  ready_.reply = std::move(reply);
  if (next) open(*next, Caller::not_yet);
}

// Moves what the agreement decided into ready_, beginning the rounds that
// its decisions let begin, until it has nothing more.
void TransactionDriver::pump() {
  for (;;) {
    agreement_.take_ready(taken_);
    if (taken_.messages.empty() && taken_.settled.empty()) return;
    ready_.messages.insert(ready_.messages.end(), std::make_move_iterator(taken_.messages.begin()),
                           std::make_move_iterator(taken_.messages.end()));
    for (const auto& decision : taken_.settled) settle(decision);
  }
}

void TransactionDriver::step(const PhaseStatus& status) { agreement_.step(status); }
void TransactionDriver::step(const AbortAcknowledgement& acknowledgement) { agreement_.step(acknowledgement); }
void TransactionDriver::tick() { agreement_.tick(); }
void TransactionDriver::rank_down(RankId rank) { agreement_.rank_down(rank); }

void TransactionDriver::collect(StepOutput output) {
  if (current(output.epoch)) reply_.logits = std::move(output.logits);
}

void TransactionDriver::collect(const SamplingResult& sampled) {
  if (current(sampled.epoch)) reply_.sampled = sampled;
}

void TransactionDriver::collect(PredictionTargetHidden capture) {
  if (current(capture.epoch)) reply_.prediction_target = std::move(capture);
}

// One report per rank, in rank order, whatever order they arrive in; a
// second one from the same rank (a duplicated message) counts once.
void TransactionDriver::collect(const RankCheckpointReport& report) {
  if (!current(report.epoch) || report.session != session_ || report.rank >= rank_count_) return;
  auto& reports = reply_.checkpoints;
  const auto at = std::lower_bound(reports.begin(), reports.end(), report.rank,
                                   [](const RankCheckpointReport& r, RankId rank) { return r.rank < rank; });
  if (at == reports.end() || at->rank != report.rank) reports.insert(at, report);
}

void TransactionDriver::collect(const PromptCacheReport& report) {
  if (current(report.epoch) && report.session == session_ && report.rank == 0) first_rank_save_id_ = report.save_id;
}

void TransactionDriver::take_ready(DriverReady& ready) {
  pump();
  ready.messages.clear();
  ready.reply.reset();
  std::swap(ready, ready_);
}

Error reply_error(const TransactionReply& reply) {
  switch (reply.outcome) {
    case TransactionOutcome::refused:
      return std::move(Error(ErrorCode::state, reply.message).mark_before_state_mutation());
    case TransactionOutcome::poisoned: {
      const auto rank = reply.poison_rank == kNoRank ? std::nullopt : std::optional<std::uint32_t>(reply.poison_rank);
      return Error::poisoned({reply.poison_cause, rank, reply.poison_phase, reply.poison_epoch});
    }
    default: {
      const ErrorCode code =
          reply.phase == to_string(Commit) ? ErrorCode::commit_aborted : to_error_code(reply.error_code);
      return std::move(Error(code, "transaction aborted at epoch " + std::to_string(reply.epoch) + ": " + reply.message)
                           .at(reply.epoch, reply.phase));
    }
  }
}

FailureCode to_failure_code(ErrorCode code) {
  switch (code) {
    case ErrorCode::contract: return FailureCode::contract;
    case ErrorCode::io: return FailureCode::io;
    case ErrorCode::format: return FailureCode::format;
    case ErrorCode::architecture: return FailureCode::architecture;
    case ErrorCode::state: return FailureCode::state;
    case ErrorCode::prompt_cache: return FailureCode::prompt_cache;
    default: return FailureCode::mechanism;
  }
}

ErrorCode to_error_code(FailureCode code) {
  switch (code) {
    case FailureCode::contract: return ErrorCode::contract;
    case FailureCode::io: return ErrorCode::io;
    case FailureCode::format: return ErrorCode::format;
    case FailureCode::architecture: return ErrorCode::architecture;
    case FailureCode::state: return ErrorCode::state;
    case FailureCode::prompt_cache: return ErrorCode::prompt_cache;
    case FailureCode::mechanism: return ErrorCode::mechanism;
  }
  return ErrorCode::mechanism;
}

}  // namespace accord
