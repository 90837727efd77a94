#include "actors/coordinator.hpp"

#include <caf/all.hpp>
#include <memory>
#include <optional>

#include "actors/atoms.hpp"
#include "messages/session_api.hpp"
#include "runtime/agreement/transaction_plan.hpp"

namespace accord {

namespace {

using enum DistributedExecutionPhase;

struct CoordinatorState {
  std::unique_ptr<CoordinatorAgreement> agreement;
  CoordinatorOptions options;
  SessionId session = 0;
  std::vector<caf::actor> ranks;
  Epoch next_epoch = 1;
  // A tick is on its way. The timer runs only while a phase or an abort is
  // being agreed on, so an idle session wakes no thread.
  bool ticking = false;
  caf::actor_clock::time_point tick_due;  // when the tick on its way is due

  // The open transaction, while `busy`.
  bool busy = false;
  std::vector<PlannedRound> plan;
  std::size_t next_round = 0;
  PhaseId round_end;  // the last phase of the round begun
  std::optional<PromptCacheArguments> load;  // a prompt-cache load's arguments
  std::string first_rank_save_id;            // a load's: from rank 0's PromptCacheReport
  TransactionReply reply;
  caf::response_promise promise;
};

using CoordinatorActor = caf::stateful_actor<CoordinatorState>;

// The reply says the session is poisoned by `poison`, in words and as fields.
void record_poison(TransactionReply& reply, const PhaseDecision& poison) {
  reply.poison_cause = describe(poison);
  reply.poison_rank = poison.cause.rank;
  reply.poison_phase = to_string(poison.phase);
  reply.poison_epoch = poison.epoch;
  reply.message = "the session is poisoned: " + reply.poison_cause;
}

void finish(CoordinatorActor* self, TransactionOutcome outcome, const PhaseDecision* decision) {
  auto& s = self->state;
  s.reply.outcome = outcome;
  if (decision != nullptr) {
    s.reply.phase = to_string(decision->phase);
    s.reply.error_code = decision->cause.kind == CauseKind::rank_error ? decision->cause.error_code
                                                                       : FailureCode::mechanism;
    s.reply.message = describe(*decision);
    if (outcome == TransactionOutcome::poisoned) record_poison(s.reply, *decision);
  }
  s.busy = false;
  s.promise.deliver(std::move(s.reply));
  s.reply = {};
}

bool pump(CoordinatorActor* self);

// Begins the next planned round of the open transaction.
void begin_next(CoordinatorActor* self) {
  auto& s = self->state;
  PlannedRound& round = s.plan[s.next_round];
  if (round.phase.phase == PromptCacheLoadPreparation) {
    // Every rank must load a generation of the same save: rank 0's. A rank
    // whose live generation belongs to another save (a concurrent writer,
    // or ranks left from two saves) refuses, and the load aborts.
    s.load->save_id = s.first_rank_save_id;
    round.arguments = *s.load;
  }
  const auto position = s.next_round + 1 == s.plan.size() ? PhasePosition::last : PhasePosition::intermediate;
  ++s.next_round;
  s.reply.phases_run += 1 + round.riders.size();
  s.round_end = round.riders.empty() ? round.phase : round.riders.back();
  Status begun =
      s.next_round == 1 && round.phase.phase == SessionResetPreparation
          ? s.agreement->begin_reset(s.reply.epoch, std::move(round.arguments), std::move(round.riders), position)
          : s.agreement->begin(s.reply.epoch, round.phase, position, std::move(round.arguments),
                               std::move(round.riders));
  if (!begun) {
    s.reply.message = begun.error().message();
    const bool poisoned = s.agreement->poisoned();
    if (poisoned) record_poison(s.reply, *s.agreement->poison());
    finish(self, poisoned ? TransactionOutcome::poisoned : TransactionOutcome::refused, nullptr);
    return;
  }
  pump(self);
}

void settle(CoordinatorActor* self, const PhaseDecision& decision) {
  auto& s = self->state;
  if (!s.busy || decision.epoch != s.reply.epoch) return;  // a poison between transactions
  switch (decision.decision) {
    case Decision::proceed:
      // A round's phases proceed one by one; the next round begins after
      // its last.
      if (decision.phase == s.round_end) begin_next(self);
      break;
    case Decision::commit:
      finish(self, TransactionOutcome::committed, nullptr);
      break;
    case Decision::abort:
      finish(self, TransactionOutcome::aborted, &decision);
      break;
    case Decision::poison:
      finish(self, TransactionOutcome::poisoned, &decision);
      break;
  }
}

// Sends what the agreement decided; true when there was anything.
bool pump(CoordinatorActor* self) {
  CoordinatorReady ready = self->state.agreement->take_ready();
  const bool anything = !ready.messages.empty() || !ready.settled.empty();
  for (auto& message : ready.messages) {
    const caf::actor& rank = self->state.ranks.at(message.to);
    std::visit([&](auto& m) { self->send(rank, std::move(m)); }, message.message);
  }
  for (const auto& decision : ready.settled) settle(self, decision);
  auto& s = self->state;
  if (!s.ticking && s.agreement->agreeing()) {
    s.ticking = true;
    s.tick_due = self->clock().now() + s.options.tick;
    self->delayed_send(self, s.options.tick, tick_atom::value);
  }
  return anything;
}

// A loaded machine delivers ticks late; counting the periods that really
// passed keeps the deadlines in wall time rather than in ticks received.
void on_tick(CoordinatorActor* self) {
  auto& s = self->state;
  s.ticking = false;
  const auto late = self->clock().now() - s.tick_due;
  const auto periods = 1 + std::max<std::int64_t>(0, late / s.options.tick);
  // A deadline that passes starts the next one (an abort's), which runs
  // from now: the periods after it are not counted toward it.
  for (std::int64_t i = 0; i < periods; ++i) {
    s.agreement->tick();
    if (pump(self)) return;
  }
}

// Every rank's state report, asked through the coordinator: its messages
// to a rank keep their order, so each rank has applied every decision the
// coordinator sent before it answers. A rank that does not answer gets a
// report with an empty digest.
void collect_rank_states(CoordinatorActor* self) {
  struct Collection {
    caf::response_promise promise;
    std::vector<RankStateReport> reports;
    std::size_t missing = 0;
  };
  auto collection = std::make_shared<Collection>();
  collection->promise = self->make_response_promise();
  collection->reports.resize(self->state.ranks.size());
  collection->missing = self->state.ranks.size();
  auto answered = [collection] {
    if (--collection->missing == 0) collection->promise.deliver(std::move(collection->reports));
  };
  for (std::size_t r = 0; r < self->state.ranks.size(); ++r) {
    self->request(self->state.ranks[r], std::chrono::seconds(5), rank_state_atom::value)
        .then([=](RankStateReport& report) {
                collection->reports[r] = std::move(report);
                answered();
              },
              [=](caf::error&) { answered(); });
  }
}

caf::behavior coordinator_actor(CoordinatorActor* self, SessionId session, RankId rank_count,
                                CoordinatorOptions options) {
  auto& s = self->state;
  s.agreement = std::make_unique<CoordinatorAgreement>(session, rank_count, options.agreement);
  s.options = options;
  s.session = session;
  self->set_down_handler([=](caf::down_msg& down) {
    auto& ranks = self->state.ranks;
    for (RankId r = 0; r < ranks.size(); ++r) {
      if (ranks[r].address() == down.source) self->state.agreement->rank_down(r);
    }
    pump(self);
  });
  return {
      [=](restart_atom, RankId rank, caf::actor agreement) {
        auto& st = self->state;
        if (rank >= st.ranks.size()) return;
        st.ranks[rank] = std::move(agreement);
        self->monitor(st.ranks[rank]);
        st.agreement->rank_up(rank);
      },
      [=](topology_atom, const std::vector<caf::actor>& ranks) {
        self->state.ranks = ranks;
        for (const auto& rank : ranks) self->monitor(rank);
      },
      [=](const TransactionRequest& request) -> caf::result<TransactionReply> {
        auto& st = self->state;
        if (st.busy) {
          TransactionReply busy;
          busy.outcome = TransactionOutcome::refused;
          busy.message = "the session is running another transaction";
          return busy;
        }
        st.busy = true;
        st.plan = plan_transaction(request, static_cast<RankId>(st.ranks.size()));
        st.next_round = 0;
        st.load.reset();
        if (request.kind == TransactionKind::prompt_cache_load) st.load = cache_arguments(request);
        st.first_rank_save_id.clear();
        st.reply = {};
        st.reply.epoch = st.next_epoch++;
        st.promise = self->make_response_promise();
        begin_next(self);
        return caf::delegated<TransactionReply>();
      },
      [=](const PhaseStatus& status) {
        self->state.agreement->step(status);
        pump(self);
      },
      [=](const AbortAcknowledgement& acknowledgement) {
        self->state.agreement->step(acknowledgement);
        pump(self);
      },
      [=](StepOutput& output) {
        if (self->state.busy && output.epoch == self->state.reply.epoch) self->state.reply.logits = std::move(output.logits);
      },
      [=](const SamplingResult& sampled) {
        if (self->state.busy && sampled.epoch == self->state.reply.epoch) self->state.reply.sampled = sampled;
      },
      [=](PredictionTargetHidden& capture) {
        auto& st = self->state;
        if (st.busy && capture.epoch == st.reply.epoch) st.reply.prediction_target = std::move(capture);
      },
      [=](const RankCheckpointReport& report) {
        if (self->state.busy && report.epoch == self->state.reply.epoch) self->state.reply.checkpoints.push_back(report);
      },
      [=](dropped_atom) { return self->state.agreement->dropped().counts(); },
      [=](down_atom) {
        std::vector<RankId> down;
        for (RankId r = 0; r < self->state.ranks.size(); ++r) {
          if (self->state.agreement->is_down(r)) down.push_back(r);
        }
        return down;
      },
      [=](rank_state_atom) -> caf::result<std::vector<RankStateReport>> {
        if (self->state.ranks.empty()) return std::vector<RankStateReport>{};
        collect_rank_states(self);
        return caf::delegated<std::vector<RankStateReport>>();
      },
      [=](const PromptCacheReport& report) {
        auto& st = self->state;
        if (st.busy && report.session == st.session && report.epoch == st.reply.epoch && report.rank == 0) st.first_rank_save_id = report.save_id;
      },
      [=](tick_atom) { on_tick(self); },
  };
}

}  // namespace

caf::actor spawn_coordinator(caf::actor_system& system, SessionId session, RankId rank_count,
                             CoordinatorOptions options) {
  return system.spawn(coordinator_actor, session, rank_count, options);
}

}  // namespace accord
