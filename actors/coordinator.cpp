#include "actors/coordinator.hpp"

#include <caf/all.hpp>
#include <memory>

#include "actors/atoms.hpp"
#include "messages/phase_arguments.hpp"
#include "messages/session_api.hpp"

namespace accord {

namespace {

using enum DistributedExecutionPhase;

struct PlannedPhase {
  PhaseId id;
  Bytes arguments;
};

// The phases of each operation, in order (docs/protocol.md).
std::vector<PlannedPhase> plan_for(const TransactionRequest& request, RankId ranks) {
  std::vector<PlannedPhase> plan;
  switch (request.kind) {
    case TransactionKind::forward_step:
      plan.push_back({phase_id(StateCheckpoint), encode_tokens(request.tokens)});
      for (RankId r = 0; r + 1 < ranks; ++r) {
        plan.push_back({boundary_phase_id(BoundarySourceCompletion, r, r + 1), {}});
        plan.push_back({boundary_phase_id(BoundarySourceReady, r, r + 1), {}});
      }
      plan.push_back({phase_id(Execution), {}});
      plan.push_back({phase_id(OutputObservation), {static_cast<std::uint8_t>(request.all_rows ? 1 : 0)}});
      if (request.capture_prediction_target) {
        plan.push_back({phase_id(PredictionTargetCapture), {}});
        plan.push_back({phase_id(PredictionTargetCapturePublication), {}});
      }
      plan.push_back({phase_id(OutputPublication), {}});
      if (request.sample) plan.push_back({phase_id(SamplingSynchronization), encode_sampling(request.sampling)});
      break;
    case TransactionKind::checkpoint:
      plan.push_back({phase_id(SessionCheckpoint), {}});
      break;
    case TransactionKind::rollback:
      plan.push_back({phase_id(SessionRollbackPreparation),
                      encode_rollback({request.position, request.state_epoch, request.reset_count})});
      break;
    case TransactionKind::reset:
      plan.push_back({phase_id(SessionResetPreparation), {}});
      break;
  }
  plan.push_back({phase_id(MechanismCompletion), {}});
  plan.push_back({phase_id(Commit), {}});
  return plan;
}

struct CoordinatorState {
  std::unique_ptr<CoordinatorAgreement> agreement;
  CoordinatorOptions options;
  SessionId session = 0;
  std::vector<caf::actor> ranks;
  Epoch next_epoch = 1;

  // The open transaction, while `busy`.
  bool busy = false;
  std::vector<PlannedPhase> plan;
  std::size_t next_phase = 0;
  TransactionReply reply;
  caf::response_promise promise;
};

using CoordinatorActor = caf::stateful_actor<CoordinatorState>;

void finish(CoordinatorActor* self, TransactionOutcome outcome, const PhaseDecision* decision) {
  auto& s = self->state;
  s.reply.outcome = outcome;
  if (decision != nullptr) {
    s.reply.phase = to_string(decision->phase);
    s.reply.error_code = decision->cause.kind == CauseKind::rank_error ? decision->cause.error_code
                                                                       : FailureCode::mechanism;
    s.reply.message = describe(*decision);
    if (outcome == TransactionOutcome::poisoned) s.reply.message = "the session is poisoned: " + s.reply.message;
  }
  s.busy = false;
  s.promise.deliver(std::move(s.reply));
  s.reply = {};
}

void pump(CoordinatorActor* self);

// Begins the next planned phase of the open transaction.
void begin_next(CoordinatorActor* self) {
  auto& s = self->state;
  PlannedPhase& phase = s.plan[s.next_phase];
  const auto position = s.next_phase + 1 == s.plan.size() ? PhasePosition::last : PhasePosition::intermediate;
  ++s.next_phase;
  ++s.reply.phases_run;
  Status begun = s.next_phase == 1 && phase.id.phase == SessionResetPreparation
                     ? s.agreement->begin_reset(s.reply.epoch, std::move(phase.arguments))
                     : s.agreement->begin(s.reply.epoch, phase.id, position, std::move(phase.arguments));
  if (!begun) {
    s.reply.message = begun.error().message();
    const bool poisoned = s.agreement->poisoned();
    if (poisoned) s.reply.message = "the session is poisoned: " + describe(*s.agreement->poison());
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
      begin_next(self);
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

void pump(CoordinatorActor* self) {
  CoordinatorReady ready = self->state.agreement->take_ready();
  for (auto& message : ready.messages) {
    const caf::actor& rank = self->state.ranks.at(message.to);
    std::visit([&](auto& m) { self->send(rank, std::move(m)); }, message.message);
  }
  for (const auto& decision : ready.settled) settle(self, decision);
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
  self->send(self, tick_atom::value);
  return {
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
        st.plan = plan_for(request, static_cast<RankId>(st.ranks.size()));
        st.next_phase = 0;
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
        if (st.busy && capture.epoch == st.reply.epoch) st.reply.prediction_target_capture = std::move(capture.hidden);
      },
      [=](const RankCheckpointReport& report) {
        if (self->state.busy && report.epoch == self->state.reply.epoch) self->state.reply.checkpoints.push_back(report);
      },
      [=](tick_atom) {
        self->state.agreement->tick();
        pump(self);
        self->delayed_send(self, self->state.options.tick, tick_atom::value);
      },
  };
}

}  // namespace

caf::actor spawn_coordinator(caf::actor_system& system, SessionId session, RankId rank_count,
                             CoordinatorOptions options) {
  return system.spawn(coordinator_actor, session, rank_count, options);
}

}  // namespace accord
