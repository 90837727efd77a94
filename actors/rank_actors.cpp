#include "actors/rank_actors.hpp"

#include <caf/all.hpp>
#include <optional>
#include <tuple>

#include "actors/atoms.hpp"
#include "actors/failure_codes.hpp"
#include "messages/phase_arguments.hpp"
#include "runtime/agreement/rank_agreement.hpp"

namespace accord {

namespace {

using enum DistributedExecutionPhase;

// The outcome of a local action as it travels between a rank's actors.
using LocalResult = std::tuple<bool, std::uint8_t, std::string>;

LocalResult to_local(const Status& status) {
  if (status) return {true, 0, ""};
  return {false, static_cast<std::uint8_t>(to_failure_code(status.error().code())), status.error().message()};
}

WireTensor to_wire(RowBlock block) {
  return {{block.rows, block.width}, std::move(block.data)};
}

RowBlock from_wire(const WireTensor& t) {
  if (t.shape.size() != 2) return {};
  return {static_cast<int>(t.shape[0]), static_cast<int>(t.shape[1]), t.data};
}

// The output owner's pick, or why it has none.
using SampleReply = std::tuple<bool, std::uint8_t, std::string, SamplingResult>;

SampleReply sample_on(RankWorker& worker, const SamplingArguments& arguments) {
  // The seed only starts a random stream; the caller's rng_state continues it.
  const SamplerOptions options{arguments.temperature, arguments.top_p, 0};
  auto sample = worker.sample(options, arguments.rng_state, arguments.stop_tokens);
  if (!sample) return std::tuple_cat(to_local(sample.error()), std::make_tuple(SamplingResult{}));
  SamplingResult sampled;
  sampled.token = sample->sampled.token;
  sampled.stop = sample->sampled.stop;
  sampled.rng_state = sample->rng_state;
  return {true, 0, "", sampled};
}

// --- execution: compute, on its own thread --------------------------------

caf::behavior execution_actor(caf::event_based_actor*, std::shared_ptr<RankWorker> worker) {
  return {
      [=](run_units_atom) -> LocalResult { return to_local(worker->run_units()); },
      [=](observe_atom, bool all_rows) -> LocalResult { return to_local(worker->observe_output(all_rows)); },
      [=](output_atom) -> WireTensor { return to_wire(worker->published_output()); },
      [=](sample_atom, const SamplingArguments& arguments) -> SampleReply { return sample_on(*worker, arguments); },
      [=](capture_atom) -> LocalResult { return to_local(worker->capture_prediction_target()); },
      [=](captured_atom) -> WireTensor { return to_wire(worker->prediction_target_capture()); },
      [=](outgoing_atom) -> WireTensor { return to_wire(worker->outgoing_activations()); },
  };
}

// --- state: the rank's KV state ------------------------------------------

caf::behavior state_actor(caf::event_based_actor*, std::shared_ptr<RankWorker> worker) {
  return {
      [=](begin_step_atom, Epoch epoch, const std::vector<int>& tokens) -> LocalResult {
        return to_local(worker->begin_step(epoch, tokens));
      },
      [=](accept_atom, const WireTensor& activations) -> LocalResult {
        return to_local(worker->receive_activations(from_wire(activations)));
      },
      [=](checkpoint_atom) -> RankCheckpointReport {
        const RankCheckpoint cp = worker->checkpoint();
        RankCheckpointReport report;
        report.position = cp.position;
        report.state_epoch = cp.state_epoch;
        report.reset_count = cp.reset_count;
        report.digest = cp.digest;
        return report;
      },
      [=](rollback_atom, Epoch epoch, std::int32_t position, std::uint64_t state_epoch,
          std::uint64_t reset_count) -> LocalResult {
        return to_local(worker->prepare_rollback(epoch, {position, state_epoch, reset_count, ""}));
      },
      [=](reset_atom, Epoch epoch) -> LocalResult { return to_local(worker->prepare_reset(epoch)); },
      [=](commit_atom, Epoch epoch) { worker->commit(epoch); },
      [=](restore_atom, Epoch epoch) -> LocalResult { return to_local(worker->restore(epoch)); },
      [=](forget_atom) { worker->forget_open_transaction(); },
  };
}

// --- agreement: the rank's voice in every phase ----------------------------

// Data that a phase of this rank waits for from another rank. It may arrive
// before the phase begins (another rank's message can overtake the
// coordinator's begin) or after.
template <class Data>
struct Awaited {
  std::optional<Data> data;
  std::optional<RunPhase> phase;

  // The phase waiting for its epoch's data, once both are here.
  std::optional<RunPhase> ready() const {
    if (data && phase && data->epoch == phase->epoch) return phase;
    return std::nullopt;
  }
  void reset() {
    data.reset();
    phase.reset();
  }
};

struct AgreementState {
  std::unique_ptr<RankAgreement> machine;
  std::shared_ptr<RankWorker> worker;
  SessionId session = 0;
  caf::actor coordinator;
  caf::actor execution;
  caf::actor state;
  std::vector<caf::actor> ranks;         // every rank's agreement actor, in rank order
  Awaited<RouteTransfer> activations;    // BoundarySourceReady on a route's target
  Awaited<SamplingResult> sampled;       // SamplingSynchronization off the output owner
  Awaited<PredictionTargetHidden> capture;  // PredictionTargetCapturePublication off the output owner
};

using AgreementActor = caf::stateful_actor<AgreementState>;

void pump(AgreementActor* self);

void finish_phase(AgreementActor* self, const RunPhase& run, const LocalResult& result) {
  const auto& [ok, code, message] = result;
  if (ok) {
    self->state.machine->phase_done(run.epoch, run.phase);
  } else {
    self->state.machine->phase_failed(run.epoch, run.phase, static_cast<FailureCode>(code), message);
  }
  pump(self);
}

// Runs `request` on `target` and finishes the phase with its LocalResult.
template <class... Ts>
void run_on(AgreementActor* self, const caf::actor& target, const RunPhase& run, Ts&&... request) {
  self->request(target, caf::infinite, std::forward<Ts>(request)...)
      .then([=](bool ok, std::uint8_t code, std::string& message) { finish_phase(self, run, {ok, code, message}); },
            [=](caf::error& error) {
              finish_phase(self, run, {false, static_cast<std::uint8_t>(FailureCode::mechanism),
                                       "local actor failed: " + self->system().render(error)});
            });
}

// Whether a message from another rank belongs to this session's open or
// next transaction; older ones are stale.
bool is_current(const AgreementState& s, SessionId session, Epoch epoch) {
  return session == s.session && epoch >= s.machine->epoch();
}

// BoundarySourceReady on the route's target, once the activations are here.
void accept_activations(AgreementActor* self) {
  auto& awaited = self->state.activations;
  const auto run = awaited.ready();
  if (!run) return;
  WireTensor activations = std::move(awaited.data->activations);
  awaited.reset();
  run_on(self, self->state.state, *run, accept_atom::value, std::move(activations));
}

void run_boundary_ready(AgreementActor* self, const RunPhase& run) {
  auto& s = self->state;
  const RankId me = static_cast<RankId>(s.worker->rank());
  if (run.phase.route.source == me) {
    if (run.phase.route.target >= s.ranks.size()) {
      return finish_phase(self, run, {false, static_cast<std::uint8_t>(FailureCode::contract),
                                      "no rank " + std::to_string(run.phase.route.target) + " to send activations to"});
    }
    // The completion of this route was agreed: the transfer may start.
    self->request(s.execution, caf::infinite, outgoing_atom::value).then([=](WireTensor& activations) {
      const caf::actor& next = self->state.ranks.at(run.phase.route.target);
      self->send(next, RouteTransfer{self->state.session, run.epoch, run.phase.route, std::move(activations)});
      finish_phase(self, run, {true, 0, ""});
    });
  } else if (run.phase.route.target == me) {
    s.activations.phase = run;
    accept_activations(self);
  } else {
    finish_phase(self, run, {true, 0, ""});
  }
}

// Sends what the output owner publishes to every other rank and to the
// coordinator.
template <class Message>
void share_with_every_rank(AgreementActor* self, const Message& message) {
  auto& s = self->state;
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    if (static_cast<int>(r) != s.worker->rank()) self->send(s.ranks[r], message);
  }
  self->send(s.coordinator, message);
}

// A rank other than the output owner reports that it holds what the owner
// shared once it is here; it keeps it until the step ends.
template <class Data>
void hold_when_here(AgreementActor* self, Awaited<Data>& awaited) {
  const auto run = awaited.ready();
  if (!run) return;
  awaited.phase.reset();
  finish_phase(self, *run, {true, 0, ""});
}

// SamplingSynchronization: the output owner samples from the output it
// published and shares its pick; every other rank reports once it holds it.
void run_sampling(AgreementActor* self, const RunPhase& run) {
  auto& s = self->state;
  if (!s.worker->is_output_owner()) {
    s.sampled.phase = run;
    return hold_when_here(self, s.sampled);
  }
  auto arguments = decode_sampling(run.arguments);
  if (!arguments) return finish_phase(self, run, {false, 0, "malformed sampling arguments"});
  self->request(s.execution, caf::infinite, sample_atom::value, std::move(*arguments))
      .then([=](bool ok, std::uint8_t code, std::string& message, SamplingResult& sampled) {
        if (ok) {
          sampled.session = self->state.session;
          sampled.epoch = run.epoch;
          share_with_every_rank(self, sampled);
        }
        finish_phase(self, run, {ok, code, message});
      });
}

// PredictionTargetCapturePublication: the output owner shares the capture
// it took; every other rank reports once it holds it.
void run_capture_publication(AgreementActor* self, const RunPhase& run) {
  auto& s = self->state;
  if (!s.worker->is_output_owner()) {
    s.capture.phase = run;
    return hold_when_here(self, s.capture);
  }
  self->request(s.execution, caf::infinite, captured_atom::value).then([=](WireTensor& hidden) {
    share_with_every_rank(self, PredictionTargetHidden{self->state.session, run.epoch, std::move(hidden)});
    finish_phase(self, run, {true, 0, ""});
  });
}

void run_local(AgreementActor* self, const RunPhase& run) {
  auto& s = self->state;
  const RankId me = static_cast<RankId>(s.worker->rank());
  const bool owner = s.worker->is_output_owner();
  const LocalResult ok{true, 0, ""};
  switch (run.phase.phase) {
    case StateCheckpoint: {
      auto tokens = decode_tokens(run.arguments);
      if (!tokens) return finish_phase(self, run, {false, 0, "malformed token arguments"});
      return run_on(self, s.state, run, begin_step_atom::value, run.epoch, std::move(*tokens));
    }
    case BoundarySourceCompletion:
      if (run.phase.route.source == me) return run_on(self, s.execution, run, run_units_atom::value);
      return finish_phase(self, run, ok);
    case BoundarySourceReady:
      return run_boundary_ready(self, run);
    case Execution:
      // Ranks before the output owner ran their units at their route's
      // completion; the output owner runs its own now.
      if (owner) return run_on(self, s.execution, run, run_units_atom::value);
      return finish_phase(self, run, ok);
    case OutputObservation:
      if (!owner) return finish_phase(self, run, ok);
      return run_on(self, s.execution, run, observe_atom::value, !run.arguments.empty() && run.arguments[0] != 0);
    case OutputPublication:
      if (!owner) return finish_phase(self, run, ok);
      self->request(s.execution, caf::infinite, output_atom::value).then([=](WireTensor& logits) {
        self->send(self->state.coordinator, StepOutput{self->state.session, run.epoch, std::move(logits)});
        finish_phase(self, run, {true, 0, ""});
      });
      return;
    case PredictionTargetCapture:
      if (!owner) return finish_phase(self, run, ok);
      return run_on(self, s.execution, run, capture_atom::value);
    case PredictionTargetCapturePublication:
      return run_capture_publication(self, run);
    case SamplingSynchronization:
      return run_sampling(self, run);
    case SessionCheckpoint:
      self->request(s.state, caf::infinite, checkpoint_atom::value).then([=](RankCheckpointReport& report) {
        report.session = self->state.session;
        report.epoch = run.epoch;
        report.rank = me;
        self->send(self->state.coordinator, report);
        finish_phase(self, run, {true, 0, ""});
      });
      return;
    case SessionRollbackPreparation: {
      auto target = decode_rollback(run.arguments);
      if (!target) return finish_phase(self, run, {false, 0, "malformed rollback arguments"});
      return run_on(self, s.state, run, rollback_atom::value, run.epoch, target->position, target->state_epoch,
                    target->reset_count);
    }
    case SessionResetPreparation:
      return run_on(self, s.state, run, reset_atom::value, run.epoch);
    default:
      // No local work of its own on this rank (MechanismCompletion: CPU work
      // completes synchronously; Commit: applied on the decision).
      return finish_phase(self, run, ok);
  }
}

void forget_step(AgreementActor* self) {
  self->state.activations.reset();
  self->state.sampled.reset();
  self->state.capture.reset();
}

void carry_out(AgreementActor* self, const RankAction& action) {
  auto& s = self->state;
  if (const auto* run = std::get_if<RunPhase>(&action)) {
    run_local(self, *run);
  } else if (const auto* commit = std::get_if<CommitTransaction>(&action)) {
    forget_step(self);
    self->send(s.state, commit_atom::value, commit->epoch);
  } else if (const auto* restore = std::get_if<RestoreCheckpoint>(&action)) {
    forget_step(self);
    const Epoch epoch = restore->epoch;
    self->request(s.state, caf::infinite, restore_atom::value, epoch)
        .then([=](bool ok, std::uint8_t, std::string& message) {
          if (ok) {
            self->state.machine->restored(epoch);
          } else {
            self->state.machine->restore_failed(epoch, message);
          }
          pump(self);
        });
  } else if (std::holds_alternative<MarkPoisoned>(action)) {
    forget_step(self);
    self->send(s.state, forget_atom::value);
  }
}

void pump(AgreementActor* self) {
  RankReady ready = self->state.machine->take_ready();
  for (auto& message : ready.messages) {
    std::visit([&](auto& m) { self->send(self->state.coordinator, std::move(m)); }, message);
  }
  for (const auto& action : ready.actions) carry_out(self, action);
}

caf::behavior agreement_actor(AgreementActor* self, std::shared_ptr<RankWorker> worker, SessionId session,
                              caf::actor coordinator, caf::actor execution, caf::actor state) {
  auto& s = self->state;
  s.machine = std::make_unique<RankAgreement>(session, static_cast<RankId>(worker->rank()));
  s.worker = std::move(worker);
  s.session = session;
  s.coordinator = std::move(coordinator);
  s.execution = std::move(execution);
  s.state = std::move(state);
  // The helpers die with the agreement actor.
  self->link_to(s.execution);
  self->link_to(s.state);
  return {
      [=](const PhaseBegin& begin) {
        self->state.machine->step(begin);
        pump(self);
      },
      [=](const PhaseDecision& decision) {
        self->state.machine->step(decision);
        pump(self);
      },
      [=](RouteTransfer& transfer) {
        if (!is_current(self->state, transfer.session, transfer.epoch)) return;
        self->state.activations.data = std::move(transfer);
        accept_activations(self);
      },
      [=](const SamplingResult& sampled) {
        if (!is_current(self->state, sampled.session, sampled.epoch)) return;
        self->state.sampled.data = sampled;
        hold_when_here(self, self->state.sampled);
      },
      [=](PredictionTargetHidden& capture) {
        if (!is_current(self->state, capture.session, capture.epoch)) return;
        self->state.capture.data = std::move(capture);
        hold_when_here(self, self->state.capture);
      },
      [=](topology_atom, std::vector<caf::actor> ranks) { self->state.ranks = std::move(ranks); },
  };
}

}  // namespace

RankActors spawn_rank(caf::actor_system& system, std::shared_ptr<RankWorker> worker, SessionId session,
                      caf::actor coordinator) {
  RankActors actors;
  actors.execution = system.spawn<caf::detached>(execution_actor, worker);
  actors.state = system.spawn(state_actor, worker);
  actors.agreement =
      system.spawn(agreement_actor, std::move(worker), session, std::move(coordinator), actors.execution, actors.state);
  return actors;
}

}  // namespace accord
