#include "actors/rank_actors.hpp"

#include <caf/all.hpp>
#include <chrono>
#include <stdexcept>
#include <optional>
#include <tuple>

#include "actors/atoms.hpp"
#include "runtime/engine/rank_wire.hpp"
#include "runtime/engine/transaction_driver.hpp"
#include "messages/phase_arguments.hpp"
#include "runtime/agreement/rank_agreement.hpp"
#include "runtime/session/rank_prompt_cache.hpp"

namespace accord {

namespace {

using enum DistributedExecutionPhase;

// The phase's arguments as the kind T it takes, or nullptr: the phase is
// then refused as malformed.
template <class T>
const T* arguments_of(const RunPhase& run) {
  return std::get_if<T>(&run.arguments);
}

// A local result that also carries a value: its status, then the value.
template <class T>
std::tuple<LocalStatus, T> with_value(Result<T> result) {
  if (!result) return {to_local(result.error()), T{}};
  return {LocalStatus{}, std::move(*result)};
}

// --- execution: compute, on its own thread --------------------------------

ExecutionActor::behavior_type execution_actor(ExecutionActor::pointer, std::shared_ptr<RankWorker> worker) {
  return {
      [=](run_units_atom, std::uint8_t rows) -> LocalStatus {
        return to_local(worker->run_units(static_cast<OutputRows>(rows)));
      },
      [=](observe_atom) -> LocalStatus { return to_local(worker->observe_output()); },
  };
}

// --- state: the rank's KV state ------------------------------------------

RankStateReport state_report(const RankWorker& worker) {
  const SessionState& state = worker.state();
  const KvCache& kv = state.kv();
  RankStateReport report;
  report.digest = state.digest();
  report.position = state.position();
  report.state_epoch = state.state_epoch();
  report.kv_bytes_used = state.used_bytes();
  report.kv_bytes_capacity = kv.capacity_bytes();
  report.high_water = state.high_water();
  report.kv_materialized_bytes = kv.position_bytes() * static_cast<std::uint64_t>(state.high_water());
  return report;
}

StateActor::behavior_type state_actor(StateActor::pointer, std::shared_ptr<RankWorker> worker) {
  return {
      [=](begin_step_atom, Epoch epoch, const std::vector<int>& tokens) -> LocalStatus {
        return to_local(worker->begin_step(epoch, tokens));
      },
      [=](accept_atom, const WireTensor& activations) -> LocalStatus {
        return to_local(worker->receive_activations(from_wire(activations)));
      },
      [=](apply_prediction_atom) -> LocalStatus { return to_local(worker->apply_prediction_target_operation()); },
      [=](rank_state_atom) -> RankStateReport { return state_report(*worker); },
      [=](checkpoint_atom) -> RankCheckpointReport {
        const RankCheckpoint cp = worker->checkpoint();
        RankCheckpointReport report;
        report.position = cp.position;
        report.state_epoch = cp.state_epoch;
        report.reset_epoch = cp.reset_epoch;
        report.digest = cp.digest;
        return report;
      },
      [=](rollback_atom, Epoch epoch, const RollbackTarget& target) -> LocalStatus {
        return to_local(worker->prepare_rollback(epoch, {target.position, target.state_epoch, target.reset_epoch, ""}));
      },
      [=](reset_atom, Epoch epoch) -> LocalStatus { return to_local(worker->prepare_reset(epoch)); },
      [=](check_prefix_atom, const std::vector<int>& prefix) -> LocalStatus {
        return to_local(worker->check_prefix_held(prefix));
      },
      [=](pack_shard_atom, int rows) -> std::vector<float> { return worker->pack_shard(rows); },
      [=](prepare_load_atom, Epoch epoch, std::vector<int>& prefix, std::vector<float>& shard) -> LocalStatus {
        return to_local(worker->prepare_load(epoch, std::move(prefix), std::move(shard)));
      },
      [=](commit_atom, Epoch epoch) { worker->commit(epoch); },
      [=](restore_atom, Epoch epoch) -> LocalStatus { return to_local(worker->restore(epoch)); },
      [=](forget_atom) { worker->forget_open_transaction(); },
  };
}

// --- cache: prompt-cache shard I/O, on its own thread -----------------------
// Detached like the execution actor: writing, fsyncing, re-reading and
// hashing a shard takes as long as the disk does, and a scheduler thread
// stalled on it would stall other ranks' agreement actors with it.

CacheActor::behavior_type cache_actor(CacheActor::pointer, std::shared_ptr<RankPromptCache> cache) {
  return {
      [=](save_prepare_atom, Epoch epoch, const PromptCacheArguments& a,
          const std::vector<float>& shard) -> LocalStatus {
        return to_local(cache->prepare_save(epoch, to_request(a), a.save_id, shard));
      },
      [=](publish_atom, Epoch epoch) -> LocalStatus { return to_local(cache->publish(epoch)); },
      [=](load_preflight_atom, Epoch epoch, const PromptCacheArguments& a) -> std::tuple<LocalStatus, std::string> {
        return with_value(cache->begin_load(epoch, to_request(a)));
      },
      [=](load_read_atom, Epoch epoch, const std::string& save_id) -> std::tuple<LocalStatus, std::vector<float>> {
        return with_value(cache->read_load(epoch, save_id));
      },
      [=](corrupt_atom, Epoch epoch) -> LocalStatus { return to_local(cache->corrupt_shard(epoch)); },
      [=](commit_atom, Epoch epoch) { cache->commit(epoch); },
      [=](restore_atom, Epoch epoch) -> LocalStatus { return to_local(cache->revert(epoch)); },
      [=](forget_atom) { cache->forget(); },
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
  ExecutionActor execution;
  StateActor state;
  CacheActor cache;
  std::vector<caf::actor> ranks;            // every rank's agreement actor, in rank order
  Awaited<RouteTransfer> activations;       // BoundarySourceReady on a route's target
  Awaited<SamplingResult> sampled;          // SamplingSynchronization off the output owner
  Awaited<PredictionTargetHidden> capture;  // PredictionTargetCapturePublication off the output owner
  DroppedMessages dropped_data;             // data beside the protocol; the machine counts the rest

  // Fault injection (runtime/fault/fault_plan.hpp).
  RankFaults faults;
  std::chrono::milliseconds fault_delay{0};  // how long a `delay` fault holds local work back
  std::optional<RunPhase> delayed;           // the local work it holds back
  FaultMarks marks;                          // of the drop and corrupt faults that fired
};

using AgreementActor = caf::stateful_actor<AgreementState>;

void pump(AgreementActor* self);
void corrupt_shard_then_finish(AgreementActor* self, const RunPhase& run);

void finish_phase(AgreementActor* self, const RunPhase& run, const LocalStatus& result) {
  if (result.ok && self->state.marks.corrupt_after(run)) {
    return corrupt_shard_then_finish(self, run);
  }
  if (result.ok) {
    self->state.machine->phase_done(run.epoch, run.phase);
  } else {
    self->state.machine->phase_failed(run.epoch, run.phase, result.code, result.message);
  }
  pump(self);
}

// Fails the phase when a local actor could not answer.
auto fail_phase_on_error(AgreementActor* self, const RunPhase& run) {
  return [=](caf::error& error) {
    finish_phase(self, run,
                 LocalStatus::failure(FailureCode::mechanism, "local actor failed: " + self->system().render(error)));
  };
}

// Runs `request` on `target` and finishes the phase with its LocalStatus.
template <class Handle, class... Ts>
void run_on(AgreementActor* self, const Handle& target, const RunPhase& run, Ts&&... request) {
  self->request(target, caf::infinite, std::forward<Ts>(request)...)
      .then([=](LocalStatus& status) { finish_phase(self, run, status); },
            fail_phase_on_error(self, run));
}

// Data beside the protocol (activations, a sampled token, a capture) for
// this session's open or a later epoch; anything else is counted and dropped.
bool is_current(AgreementActor* self, SessionId session, Epoch epoch) {
  auto& s = self->state;
  if (session != s.session) {
    s.dropped_data.count(DropReason::other_session);
    return false;
  }
  if (epoch < s.machine->epoch()) {
    s.dropped_data.count(DropReason::stale_epoch);
    return false;
  }
  return true;
}

// A `corrupt` fault: the shard is written (and verified); the damage comes
// after, as a failing disk's would, so only a later load can notice it.
void corrupt_shard_then_finish(AgreementActor* self, const RunPhase& run) {
  run_on(self, self->state.cache, run, corrupt_atom::value, run.epoch);
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
      return finish_phase(self, run,
                          LocalStatus::failure(FailureCode::contract, "no rank " + std::to_string(run.phase.route.target) +
                                                                          " to send activations to"));
    }
    // The completion of this route was agreed: the transfer may start. The
    // execution actor is idle between local actions, so the activations
    // are read here rather than fetched with one more hand-over.
    self->send(s.ranks[run.phase.route.target],
               RouteTransfer{s.session, run.epoch, run.phase.route, to_wire(s.worker->outgoing_activations())});
    finish_phase(self, run, LocalStatus{});
  } else if (run.phase.route.target == me) {
    s.activations.phase = run;
    accept_activations(self);
  } else {
    finish_phase(self, run, LocalStatus{});
  }
}

// --- the prompt-cache phases: the state actor's part, then the cache's ------

void run_save_preflight(AgreementActor* self, const RunPhase& run) {
  const auto* a = arguments_of<PromptCacheArguments>(run);
  if (a == nullptr) return finish_phase(self, run, to_local(malformed("prompt cache")));
  run_on(self, self->state.state, run, check_prefix_atom::value, a->prefix);
}

void run_save_preparation(AgreementActor* self, const RunPhase& run) {
  const auto* a = arguments_of<PromptCacheArguments>(run);
  if (a == nullptr) return finish_phase(self, run, to_local(malformed("prompt cache")));
  self->request(self->state.state, caf::infinite, pack_shard_atom::value, static_cast<int>(a->prefix.size()))
      .then(
          [=, a = *a](std::vector<float>& shard) {
            run_on(self, self->state.cache, run, save_prepare_atom::value, run.epoch, a, std::move(shard));
          },
          fail_phase_on_error(self, run));
}

void run_load_preflight(AgreementActor* self, const RunPhase& run) {
  const auto* a = arguments_of<PromptCacheArguments>(run);
  if (a == nullptr) return finish_phase(self, run, to_local(malformed("prompt cache")));
  self->request(self->state.cache, caf::infinite, load_preflight_atom::value, run.epoch, *a)
      .then(
          [=](LocalStatus& status, std::string& save_id) {
            auto& st = self->state;
            if (status.ok) {
              self->send(st.coordinator, PromptCacheReport{st.session, run.epoch,
                                                           static_cast<RankId>(st.worker->rank()), save_id});
            }
            finish_phase(self, run, status);
          },
          fail_phase_on_error(self, run));
}

void run_load_preparation(AgreementActor* self, const RunPhase& run) {
  const auto* a = arguments_of<PromptCacheArguments>(run);
  if (a == nullptr) return finish_phase(self, run, to_local(malformed("prompt cache")));
  self->request(self->state.cache, caf::infinite, load_read_atom::value, run.epoch, a->save_id)
      .then(
          [=, a = *a](LocalStatus& status, std::vector<float>& shard) {
            if (!status.ok) return finish_phase(self, run, status);
            run_on(self, self->state.state, run, prepare_load_atom::value, run.epoch, a.prefix, std::move(shard));
          },
          fail_phase_on_error(self, run));
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
  finish_phase(self, *run, LocalStatus{});
}

// PredictionTargetCapturePublication on a rank other than the output
// owner, once the capture is here: the rank holds it for the step.
void accept_capture(AgreementActor* self) {
  auto& awaited = self->state.capture;
  const auto run = awaited.ready();
  if (!run) return;
  awaited.phase.reset();
  finish_phase(self, *run,
               to_local(self->state.worker->exchange_prediction_target_state(received_capture(*awaited.data))));
}

// SamplingSynchronization: the output owner samples from the output it
// published and shares its pick; every other rank reports once it holds it.
void run_sampling(AgreementActor* self, const RunPhase& run) {
  auto& s = self->state;
  if (!s.worker->is_output_owner()) {
    s.sampled.phase = run;
    return hold_when_here(self, s.sampled);
  }
  const auto* arguments = arguments_of<SamplingArguments>(run);
  if (arguments == nullptr) return finish_phase(self, run, to_local(malformed("sampling")));
  // The execution actor is idle between local actions, and a pick from one
  // row takes microseconds: a hand-over to its thread and back would cost
  // more than the sampling.
  auto sampled = sample_on(*s.worker, *arguments);
  if (!sampled) return finish_phase(self, run, to_local(sampled.error()));
  sampled->session = s.session;
  sampled->epoch = run.epoch;
  share_with_every_rank(self, *sampled);
  finish_phase(self, run, LocalStatus{});
}

// PredictionTargetCapturePublication: the output owner shares the capture
// and verdict it took; every other rank reports once it holds them.
void run_capture_publication(AgreementActor* self, const RunPhase& run) {
  auto& s = self->state;
  if (!s.worker->is_output_owner()) {
    s.capture.phase = run;
    return accept_capture(self);
  }
  auto capture = published_capture(*s.worker);
  if (!capture) return finish_phase(self, run, to_local(capture.error()));
  capture->session = s.session;
  capture->epoch = run.epoch;
  share_with_every_rank(self, *capture);
  finish_phase(self, run, LocalStatus{});
}

// A phase whose arguments are the step's draft token count runs `work` with it.
template <class Work>
void with_draft_tokens(AgreementActor* self, const RunPhase& run, Work&& work) {
  const auto* draft = arguments_of<DraftTokens>(run);
  if (draft == nullptr) return finish_phase(self, run, to_local(malformed("draft")));
  finish_phase(self, run, to_local(work(draft->count)));
}

void run_local_work(AgreementActor* self, const RunPhase& run) {
  auto& s = self->state;
  const RankId me = static_cast<RankId>(s.worker->rank());
  const bool owner = s.worker->is_output_owner();
  const LocalStatus ok;
  switch (run.phase.phase) {
    case StateCheckpoint: {
      const auto* step = arguments_of<StepTokens>(run);
      if (step == nullptr) return finish_phase(self, run, to_local(malformed("token")));
      return run_on(self, s.state, run, begin_step_atom::value, run.epoch, step->tokens);
    }
    case BoundarySourceCompletion:
      if (run.phase.route.source == me) {
        return run_on(self, s.execution, run, run_units_atom::value, static_cast<std::uint8_t>(OutputRows::none));
      }
      return finish_phase(self, run, ok);
    case BoundarySourceReady:
      return run_boundary_ready(self, run);
    case Execution:
      // Ranks before the output owner ran their units at their route's
      // completion; the output owner runs its own and the head now.
      if (!owner) return finish_phase(self, run, ok);
      if (const auto* execution = arguments_of<ExecutionArguments>(run)) {
        const OutputRows rows = execution->all_rows ? OutputRows::all : OutputRows::last;
        return run_on(self, s.execution, run, run_units_atom::value, static_cast<std::uint8_t>(rows));
      }
      return finish_phase(self, run, to_local(malformed("execution")));
    case OutputObservation:
      // The output owner computed the logits in Execution; only an observer
      // has work here, and it runs on the execution thread like all user code.
      if (!owner || !s.worker->step_has_observer()) return finish_phase(self, run, ok);
      return run_on(self, s.execution, run, observe_atom::value);
    case OutputPublication:
      if (owner) self->send(s.coordinator, StepOutput{s.session, run.epoch, to_wire(s.worker->published_output())});
      return finish_phase(self, run, ok);
    case PredictionTargetCapture:
      if (!owner) return finish_phase(self, run, ok);
      return with_draft_tokens(self, run, [&](int draft) { return s.worker->capture_prediction_target(draft); });
    case PredictionTargetCapturePublication:
      return run_capture_publication(self, run);
    case PredictionTargetStatePreparation:
      return with_draft_tokens(self, run, [&](int draft) { return s.worker->prepare_prediction_target_state(draft); });
    case PredictionExtensionExecution:
      return run_on(self, s.state, run, apply_prediction_atom::value);
    case SamplingSynchronization:
      return run_sampling(self, run);
    case SessionCheckpoint:
      self->request(s.state, caf::infinite, checkpoint_atom::value).then([=](RankCheckpointReport& report) {
        report.session = self->state.session;
        report.epoch = run.epoch;
        report.rank = me;
        self->send(self->state.coordinator, report);
        finish_phase(self, run, LocalStatus{});
      });
      return;
    case SessionRollbackPreparation: {
      const auto* target = arguments_of<RollbackTarget>(run);
      if (target == nullptr) return finish_phase(self, run, to_local(malformed("rollback")));
      return run_on(self, s.state, run, rollback_atom::value, run.epoch, *target);
    }
    case SessionResetPreparation:
      return run_on(self, s.state, run, reset_atom::value, run.epoch);
    case PromptCacheSavePreflight:
      return run_save_preflight(self, run);
    case PromptCacheSavePreparation:
      return run_save_preparation(self, run);
    case PromptCacheSavePublication:
      return run_on(self, s.cache, run, publish_atom::value, run.epoch);
    case PromptCacheLoadPreflight:
      return run_load_preflight(self, run);
    case PromptCacheLoadPreparation:
      return run_load_preparation(self, run);
    default:
      // No local work of its own on this rank (MechanismCompletion: CPU work
      // completes synchronously; Commit: applied on the decision).
      return finish_phase(self, run, ok);
  }
}

// --- fault injection ----------------------------------------------------------

// Runs the phase's local part; an exception out of it fails the phase
// instead of ending the rank's actor. `injected` throws one first.
void run_guarded(AgreementActor* self, const RunPhase& run, const std::string& injected = {}) {
  const Status ran = status_of([&] {
    if (!injected.empty()) throw std::runtime_error(injected);
    run_local_work(self, run);
    return Status{};
  });
  if (!ran) finish_phase(self, run, to_local(ran));
}

// Runs the phase's local part, unless the fault plan has a fault fire now.
void run_local(AgreementActor* self, const RunPhase& run) {
  auto& s = self->state;
  const auto fault = s.faults.on_phase(run.phase);
  if (!fault) return run_guarded(self, run);
  const std::string what = injected_fault_message(*fault, s.worker->rank(), run.phase);
  switch (*fault) {
    case FaultKind::error:
      return finish_phase(self, run, LocalStatus::failure(FailureCode::mechanism, what));
    case FaultKind::throws:
      return run_guarded(self, run, what);
    case FaultKind::delay:
      s.delayed = run;
      self->delayed_send(self, s.fault_delay, delayed_atom::value, run.epoch);
      return;
    case FaultKind::exit:
      // The linked execution, state and cache actors go with it; the
      // coordinator's monitor sees the rank go down.
      return self->quit(caf::exit_reason::kill);
    case FaultKind::drop:
    case FaultKind::corrupt:
      s.marks.mark(*fault, run);
      return run_guarded(self, run);
  }
}

// An abort or a poison ends the phase a rank may still be waiting in for
// another rank's data (which may never come): nothing of it touched the
// state, so the wait ends with a failure and the rank restores or forgets.
void stop_waiting(AgreementActor* self, Epoch epoch) {
  auto stop = [&](auto& awaited) {
    if (!awaited.phase || awaited.phase->epoch != epoch) return;
    const RunPhase run = *awaited.phase;
    awaited.reset();
    finish_phase(self, run, LocalStatus::failure(FailureCode::mechanism,
                                                 "stopped waiting for another rank's data: the phase was decided"));
  };
  auto& s = self->state;
  stop(s.activations);
  stop(s.sampled);
  stop(s.capture);
}

void forget_step(AgreementActor* self) {
  self->state.activations.reset();
  self->state.sampled.reset();
  self->state.capture.reset();
}

// Abort: the state actor restores the checkpoint, then the cache actor
// reverses any publication; the rank has restored only when both did.
void restore_state_and_cache(AgreementActor* self, Epoch epoch) {
  self->request(self->state.state, caf::infinite, restore_atom::value, epoch)
      .then([=](LocalStatus& state) {
        self->request(self->state.cache, caf::infinite, restore_atom::value, epoch)
            .then([=, state = std::move(state)](LocalStatus& cache) {
              if (state.ok && cache.ok) {
                self->state.machine->restored(epoch);
              } else {
                self->state.machine->restore_failed(epoch, state.ok ? cache.message : state.message);
              }
              pump(self);
            });
      });
}

void carry_out(AgreementActor* self, const RankAction& action) {
  auto& s = self->state;
  if (const auto* run = std::get_if<RunPhase>(&action)) {
    run_local(self, *run);
  } else if (const auto* commit = std::get_if<CommitTransaction>(&action)) {
    forget_step(self);
    self->send(s.state, commit_atom::value, commit->epoch);
    self->send(s.cache, commit_atom::value, commit->epoch);
  } else if (const auto* restore = std::get_if<RestoreCheckpoint>(&action)) {
    forget_step(self);
    restore_state_and_cache(self, restore->epoch);
  } else if (std::holds_alternative<MarkPoisoned>(action)) {
    forget_step(self);
    self->send(s.state, forget_atom::value);
    self->send(s.cache, forget_atom::value);
  }
}

void pump(AgreementActor* self) {
  RankReady ready = self->state.machine->take_ready();
  for (auto& message : ready.messages) {
    if (self->state.marks.lose(message)) continue;
    std::visit([&](auto& m) { self->send(self->state.coordinator, std::move(m)); }, message);
  }
  for (const auto& action : ready.actions) carry_out(self, action);
}

caf::behavior agreement_actor(AgreementActor* self, std::shared_ptr<RankWorker> worker, SessionId session,
                              caf::actor coordinator, ExecutionActor execution, StateActor state, CacheActor cache,
                              const RankOptions& options) {
  auto& s = self->state;
  s.faults = RankFaults(static_cast<RankId>(worker->rank()), options.faults);
  // Past the deadline, with room for the abort's acknowledgement (whose
  // deadline is as long again) once the held-back work is done.
  s.fault_delay = options.phase_timeout + options.phase_timeout / 2;
  s.machine = std::make_unique<RankAgreement>(session, static_cast<RankId>(worker->rank()));
  s.worker = std::move(worker);
  s.session = session;
  s.coordinator = std::move(coordinator);
  s.execution = std::move(execution);
  s.state = std::move(state);
  s.cache = std::move(cache);
  // The helpers die with the agreement actor.
  self->link_to(s.execution);
  self->link_to(s.state);
  self->link_to(s.cache);
  return {
      [=](const PhaseBegin& begin) {
        self->state.machine->step(begin);
        pump(self);
      },
      [=](const PhaseDecision& decision) {
        self->state.machine->step(decision);
        pump(self);
        if (decision.decision == Decision::abort || decision.decision == Decision::poison) {
          stop_waiting(self, decision.epoch);
        }
      },
      [=](RouteTransfer& transfer) {
        auto& st = self->state;
        if (!is_current(self, transfer.session, transfer.epoch)) return;
        st.activations.data = std::move(transfer);
        accept_activations(self);
      },
      [=](const SamplingResult& sampled) {
        if (!is_current(self, sampled.session, sampled.epoch)) return;
        self->state.sampled.data = sampled;
        hold_when_here(self, self->state.sampled);
      },
      [=](PredictionTargetHidden& capture) {
        if (!is_current(self, capture.session, capture.epoch)) return;
        self->state.capture.data = std::move(capture);
        accept_capture(self);
      },
      [=](topology_atom, std::vector<caf::actor> ranks) { self->state.ranks = std::move(ranks); },
      [=](rank_state_atom) {
        // Through the state actor, after any commit or restore sent to it.
        return self->delegate(self->state.state, rank_state_atom::value);
      },
      [=](faults_atom, const std::vector<Fault>& plan) {
        self->state.faults = RankFaults(static_cast<RankId>(self->state.worker->rank()), plan);
        return true;
      },
      [=](delayed_atom, Epoch epoch) {
        auto& st = self->state;
        if (!st.delayed || st.delayed->epoch != epoch) return;
        const RunPhase run = std::move(*st.delayed);
        st.delayed.reset();
        run_guarded(self, run);
      },
      [=](dropped_atom) {
        DroppedMessages dropped = self->state.machine->dropped();
        dropped += self->state.dropped_data;
        return dropped.counts();
      },
  };
}

}  // namespace

RankActors spawn_rank(caf::actor_system& system, std::shared_ptr<RankWorker> worker, SessionId session,
                      caf::actor coordinator, const RankOptions& options) {
  auto spawn_local_work = [&](auto behavior, auto argument) {
    return options.detach_local_work ? system.spawn<caf::detached>(behavior, std::move(argument))
                                     : system.spawn(behavior, std::move(argument));
  };
  RankActors actors;
  actors.execution = spawn_local_work(execution_actor, worker);
  actors.state = system.spawn(state_actor, worker);
  actors.cache = spawn_local_work(cache_actor, std::make_shared<RankPromptCache>(worker->shard_identity()));
  actors.agreement = system.spawn(agreement_actor, std::move(worker), session, std::move(coordinator), actors.execution,
                                  actors.state, actors.cache, options);
  return actors;
}

}  // namespace accord
