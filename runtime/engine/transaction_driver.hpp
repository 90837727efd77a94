// The coordinator's side of a session's transactions, without a transport:
// one TransactionRequest in, its plan's rounds (transaction_plan.hpp) run
// over CoordinatorAgreement, one TransactionReply out. Every transport
// drives this one class (docs/architecture.md, "One engine"): the direct
// engine (direct_engine.hpp) calls it in the caller's thread, the
// coordinator actor (actors/coordinator.cpp) from its messages and timer.
//
// The transport hands it what arrives (step, collect), its clock (tick) and
// what it learns of ranks (rank_down, rank_up), and sends the messages it
// takes from take_ready(); a transaction is over when take_ready() holds
// its reply.
//
// Chained steps (TransactionRequest::chain_next, docs/protocol.md "Chained
// steps"): when such a step commits, the driver opens the next one itself,
// its commit held until the caller's next request asks for that same step.
// A request for anything else withdraws it first (it aborts, every rank
// restores) and then runs. A chained step that fails before its caller
// comes keeps its reply for that caller.
//
// Threading: not thread-safe; owned by one transport.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "messages/session_api.hpp"
#include "runtime/agreement/coordinator_agreement.hpp"
#include "runtime/agreement/transaction_plan.hpp"
#include "runtime/base/error.hpp"

namespace accord {

struct DriverReady {
  std::vector<CoordinatorMessage> messages;  // to send first, in order
  std::optional<TransactionReply> reply;     // then the finished transaction's answer
};

class TransactionDriver {
 public:
  TransactionDriver(SessionId session, SessionRanks ranks, AgreementOptions options = {});

  // Begins `request` under the next epoch; its reply comes through
  // take_ready(). A request while another runs is refused at once: the
  // refusal is returned, and the open transaction goes on. A chained step
  // that no caller asked for yet does not count as running: see above.
  std::optional<TransactionReply> start(const TransactionRequest& request);

  // What ranks send: statuses and acknowledgements, and what comes beside
  // them (the output, a sample, a capture, checkpoints, a load's save id).
  void step(const PhaseStatus& status);
  void step(const AbortAcknowledgement& acknowledgement);
  void collect(StepOutput output);
  void collect(const SamplingResult& sampled);
  void collect(PredictionTargetHidden capture);
  void collect(const RankCheckpointReport& report);
  void collect(const PromptCacheReport& report);

  // One unit of the transport's clock (the agreement's deadlines count them).
  void tick();
  void set_deadlines(AgreementOptions options) { agreement_.set_deadlines(options); }
  void rank_down(RankId rank);
  void rank_up(RankId rank) { agreement_.rank_up(rank); }

  DriverReady take_ready() {
    DriverReady ready;
    take_ready(ready);
    return ready;
  }
  // The same into `ready`, reusing its buffers (RankAgreement::take_ready).
  void take_ready(DriverReady& ready);

  bool busy() const { return busy_ && caller_ != Caller::not_yet; }
  // A chained step runs that no caller asked for yet.
  bool chained() const { return busy_ && caller_ == Caller::not_yet; }
  // True while a phase waits for statuses or acknowledgements: the
  // transport's clock needs to run.
  bool agreeing() const { return agreement_.agreeing(); }
  const CoordinatorAgreement& agreement() const { return agreement_; }

 private:
  // Who waits for the open transaction's reply: the caller who asked; no
  // one yet (a chained step); no one ever (a chained step withdrawn, after
  // which `after_withdrawal_` runs).
  enum class Caller { waiting, not_yet, gone };

  void open(const TransactionRequest& request, Caller caller);
  void meet_chained_step(const TransactionRequest& request);
  void run(const TransactionRequest& request);
  void begin_next();
  void settle(const PhaseDecision& decision);
  void finish(TransactionOutcome outcome, const PhaseDecision* decision);
  void deliver(TransactionReply reply);
  void pump();
  bool current(Epoch epoch) const { return busy_ && epoch == reply_.epoch; }

  CoordinatorAgreement agreement_;
  CoordinatorReady taken_;  // pump's buffers
  SessionId session_;
  RankId rank_count_;
  RankId expert_ranks_;
  Epoch next_epoch_ = 1;
  DriverReady ready_;

  // The open transaction, while busy_.
  bool busy_ = false;
  Caller caller_ = Caller::waiting;
  TransactionRequest request_;
  std::vector<PlannedRound> plan_;
  std::size_t next_round_ = 0;
  PhaseId round_end_;                         // the last phase of the round begun
  std::optional<PromptCacheArguments> load_;  // a prompt-cache load's arguments
  std::string first_rank_save_id_;            // a load's: from rank 0's PromptCacheReport
  TransactionReply reply_;

  // A chained step that ended before its caller asked for it.
  std::optional<TransactionReply> unclaimed_;
  std::optional<TransactionRequest> after_withdrawal_;
};

// What a reply that did not commit means to the caller, as one Error for
// every transport: refused before any change, aborted (every rank restored;
// a failure of the commit itself is commit_aborted) or poisoned.
Error reply_error(const TransactionReply& reply);

// The runtime's ErrorCode and its wire form FailureCode (messages/ cannot
// depend on runtime/), both ways. Codes a rank never reports travel as
// mechanism.
FailureCode to_failure_code(ErrorCode code);
ErrorCode to_error_code(FailureCode code);

}  // namespace accord
