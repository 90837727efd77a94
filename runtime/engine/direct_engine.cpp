#include "runtime/engine/direct_engine.hpp"

#include <deque>
#include <stdexcept>
#include <variant>

#include "runtime/agreement/rank_agreement.hpp"
#include "runtime/engine/rank_wire.hpp"
#include "runtime/engine/transaction_driver.hpp"
#include "runtime/session/rank_prompt_cache.hpp"

namespace accord {

namespace {

using enum DistributedExecutionPhase;

// What one rank hands another beside the protocol, for one step.
using PeerData = std::variant<RouteTransfer, SamplingResult, PredictionTargetHidden>;
using ToRank = std::variant<PhaseBegin, PhaseDecision, PeerData>;
using ToDriver = std::variant<PhaseStatus, AbortAcknowledgement, StepOutput, SamplingResult, PredictionTargetHidden,
                              RankCheckpointReport, PromptCacheReport>;

struct Envelope {
  RankId to = kNoRank;  // kNoRank: the driver
  std::variant<ToRank, ToDriver> message;
};

struct DirectRank {
  DirectRank(const Model& model, std::shared_ptr<cpu::ThreadPool> pool, const Partition& partition, int rank,
             const std::string& model_identity, SessionId session, const std::vector<Fault>& plan)
      : machine(session, static_cast<RankId>(rank)),
        worker(model, std::move(pool), partition, rank, model_identity),
        cache(worker.shard_identity()),
        faults(static_cast<RankId>(rank), plan) {}

  // What another rank sent for the open step; ends with it.
  void forget_step() {
    activations.reset();
    sampled.reset();
    capture.reset();
    waiting.reset();
  }

  RankAgreement machine;
  RankWorker worker;
  RankPromptCache cache;
  RankFaults faults;
  bool exited = false;  // an `exit` fault stopped it; a reset starts it again

  std::optional<RouteTransfer> activations;
  std::optional<SamplingResult> sampled;
  std::optional<PredictionTargetHidden> capture;
  std::optional<RunPhase> waiting;  // the phase waiting for one of them

  FaultMarks marks;  // of the drop and corrupt faults that fired
};

// A phase that a `delay` fault holds back until tick `due`.
struct Delayed {
  std::uint64_t due = 0;
  RankId rank = 0;
  RunPhase run;
};

template <class Data>
bool holds_for(const std::optional<Data>& data, const RunPhase& run) {
  return data && data->epoch == run.epoch;
}

}  // namespace

struct DirectEngine::State {
  State(const Model& m, std::shared_ptr<cpu::ThreadPool> p, const Partition& part, std::string identity,
        SessionId id, DirectEngineOptions o)
      : model(m),
        pool(std::move(p)),
        partition(part),
        model_identity(std::move(identity)),
        session(id),
        options(std::move(o)),
        driver(id, static_cast<RankId>(part.ranks()), options.agreement) {
    for (int r = 0; r < partition.ranks(); ++r) ranks.push_back(make_rank(r, options.faults));
  }

  std::unique_ptr<DirectRank> make_rank(int r, const std::vector<Fault>& faults) const {
    auto rank = std::make_unique<DirectRank>(model, pool, partition, r, model_identity, session, faults);
    rank->worker.lend_observer(observer);
    return rank;
  }

  TransactionReply run(const TransactionRequest& request) {
    if (request.kind == TransactionKind::reset) restart_exited_ranks();
    if (auto refused = driver.start(request)) return *refused;
    std::optional<TransactionReply> reply;
    for (;;) {
      DriverReady ready = driver.take_ready();
      for (auto& m : ready.messages) {
        queue.push_back({m.to, std::visit([](auto& x) { return ToRank(std::move(x)); }, m.message)});
      }
      if (ready.reply) reply = std::move(ready.reply);
      if (!queue.empty()) {
        Envelope next = std::move(queue.front());
        queue.pop_front();
        deliver(next);
      } else if (reply) {
        return std::move(*reply);
      } else if (driver.agreeing() || !delayed.empty()) {
        pass_time();
      } else {
        return stalled();
      }
    }
  }

  // Nothing to deliver, no deadline running, no reply: a bug of the
  // engine, reported rather than waited on forever.
  static TransactionReply stalled() {
    TransactionReply reply;
    reply.outcome = TransactionOutcome::poisoned;
    reply.poison_cause = "the direct engine stalled: no message, deadline or reply is left";
    reply.message = reply.poison_cause;
    return reply;
  }

  void pass_time() {
    ++now;
    driver.tick();
    for (std::size_t i = 0; i < delayed.size();) {
      if (delayed[i].due > now) {
        ++i;
        continue;
      }
      const Delayed due = std::move(delayed[i]);
      delayed.erase(delayed.begin() + static_cast<std::ptrdiff_t>(i));
      if (!ranks[due.rank]->exited) run_guarded(due.rank, due.run);
    }
  }

  void restart_exited_ranks() {
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      if (!ranks[r]->exited) continue;
      std::erase_if(delayed, [&](const Delayed& d) { return d.rank == r; });
      // As a distributed session's reset does: a fresh rank, without faults.
      ranks[r] = make_rank(static_cast<int>(r), {});
      driver.rank_up(static_cast<RankId>(r));
    }
  }

  // --- delivery ---------------------------------------------------------------

  void deliver(Envelope& envelope) {
    if (envelope.to == kNoRank) {
      std::visit([&](auto& message) { to_driver(std::move(message)); }, std::get<ToDriver>(envelope.message));
      return;
    }
    DirectRank& rank = *ranks[envelope.to];
    if (rank.exited) return;  // a stopped rank hears nothing
    std::visit([&](auto& message) { to_rank(envelope.to, rank, message); }, std::get<ToRank>(envelope.message));
  }

  void to_driver(PhaseStatus status) { driver.step(status); }
  void to_driver(AbortAcknowledgement acknowledgement) { driver.step(acknowledgement); }
  template <class Data>
  void to_driver(Data data) {
    driver.collect(std::move(data));
  }

  void to_rank(RankId r, DirectRank& rank, const PhaseBegin& begin) {
    rank.machine.step(begin);
    pump(r);
  }

  void to_rank(RankId r, DirectRank& rank, const PhaseDecision& decision) {
    rank.machine.step(decision);
    pump(r);
    if (decision.decision == Decision::abort || decision.decision == Decision::poison) stop_waiting(r, decision.epoch);
  }

  void to_rank(RankId r, DirectRank& rank, PeerData& data) {
    std::visit([&](auto& d) { keep(rank, std::move(d)); }, data);
    if (!rank.waiting) return;
    const RunPhase run = *rank.waiting;
    rank.waiting.reset();
    run_guarded(r, run);
  }

  void keep(DirectRank& rank, RouteTransfer transfer) { rank.activations = std::move(transfer); }
  void keep(DirectRank& rank, SamplingResult sampled) { rank.sampled = sampled; }
  void keep(DirectRank& rank, PredictionTargetHidden capture) { rank.capture = std::move(capture); }

  void send_to_driver(ToDriver message) { queue.push_back({kNoRank, std::move(message)}); }

  // What the output owner publishes goes to every other rank and the driver.
  template <class Message>
  void share_with_every_rank(RankId from, const Message& message) {
    for (RankId r = 0; r < ranks.size(); ++r) {
      if (r != from) queue.push_back({r, ToRank(PeerData(message))});
    }
    send_to_driver(message);
  }

  // --- a rank's machine ---------------------------------------------------------

  void pump(RankId r) {
    DirectRank& rank = *ranks[r];
    RankReady ready = rank.machine.take_ready();
    for (auto& message : ready.messages) {
      if (rank.marks.lose(message)) continue;
      std::visit([&](auto& m) { send_to_driver(std::move(m)); }, message);
    }
    for (const auto& action : ready.actions) carry_out(r, action);
  }

  void carry_out(RankId r, const RankAction& action) {
    DirectRank& rank = *ranks[r];
    if (const auto* run = std::get_if<RunPhase>(&action)) {
      run_phase(r, *run);
    } else if (const auto* commit = std::get_if<CommitTransaction>(&action)) {
      rank.forget_step();
      rank.worker.commit(commit->epoch);
      rank.cache.commit(commit->epoch);
    } else if (const auto* restore = std::get_if<RestoreCheckpoint>(&action)) {
      rank.forget_step();
      // The state, then the cache's publication: restored only when both are.
      const Status state = rank.worker.restore(restore->epoch);
      const Status cache = rank.cache.revert(restore->epoch);
      if (state && cache) {
        rank.machine.restored(restore->epoch);
      } else {
        rank.machine.restore_failed(restore->epoch, (state ? cache : state).error().message());
      }
      pump(r);
    } else if (std::holds_alternative<MarkPoisoned>(action)) {
      rank.forget_step();
      rank.worker.forget_open_transaction();
      rank.cache.forget();
    }
  }

  // An abort or a poison ends a phase waiting for another rank's data
  // (which may never come): nothing of it touched the state.
  void stop_waiting(RankId r, Epoch epoch) {
    DirectRank& rank = *ranks[r];
    if (!rank.waiting || rank.waiting->epoch != epoch) return;
    const RunPhase run = *rank.waiting;
    rank.waiting.reset();
    finish(r, run, Error(ErrorCode::mechanism, "stopped waiting for another rank's data: the phase was decided"));
  }

  // --- local work -------------------------------------------------------------

  // Runs the phase's local part, unless the fault plan has a fault fire now.
  void run_phase(RankId r, const RunPhase& run) {
    DirectRank& rank = *ranks[r];
    const auto fault = rank.faults.on_phase(run.phase);
    if (!fault) return run_guarded(r, run);
    const std::string what = injected_fault_message(*fault, static_cast<int>(r), run.phase);
    switch (*fault) {
      case FaultKind::error:
        return finish(r, run, Error(ErrorCode::mechanism, what));
      case FaultKind::throws:
        return run_guarded(r, run, what);
      case FaultKind::delay:
        // Past the status deadline, within the abort's acknowledgement's.
        delayed.push_back({now + options.agreement.status_deadline_ticks * 3 / 2, r, run});
        return;
      case FaultKind::exit:
        rank.exited = true;
        driver.rank_down(r);
        return;
      case FaultKind::drop:
      case FaultKind::corrupt:
        rank.marks.mark(*fault, run);
        return run_guarded(r, run);
    }
  }

  // An exception out of the local part fails the phase; `injected` throws
  // one first. A phase waiting for another rank's data runs again when it
  // comes.
  void run_guarded(RankId r, const RunPhase& run, const std::string& injected = {}) {
    std::optional<Status> result;
    Status ran = status_of([&] {
      if (!injected.empty()) throw std::runtime_error(injected);
      result = local_work(r, run);
      return Status{};
    });
    if (!ran) return finish(r, run, std::move(ran));
    if (!result) {
      ranks[r]->waiting = run;
      return;
    }
    finish(r, run, std::move(*result));
  }

  void finish(RankId r, const RunPhase& run, Status status) {
    DirectRank& rank = *ranks[r];
    if (status && rank.marks.corrupt_after(run)) status = rank.cache.corrupt_shard(run.epoch);
    if (status && hook) status = status_of([&] { return hook(r, run.phase, run.epoch); });
    if (status) {
      rank.machine.phase_done(run.epoch, run.phase);
    } else {
      rank.machine.phase_failed(run.epoch, run.phase, to_failure_code(status.error().code()),
                                status.error().message());
    }
    pump(r);
  }

  // The rank's local part of `run`; nullopt while it waits for another
  // rank's data.
  std::optional<Status> local_work(RankId me, const RunPhase& run) {
    DirectRank& rank = *ranks[me];
    RankWorker& worker = rank.worker;
    const bool owner = worker.is_output_owner();
    const Epoch epoch = run.epoch;
    switch (run.phase.phase) {
      case StateCheckpoint:
        if (const auto* step = std::get_if<StepTokens>(&run.arguments)) return worker.begin_step(epoch, step->tokens);
        return malformed("token");
      case BoundarySourceCompletion:
        if (run.phase.route.source == me) return worker.run_units(OutputRows::none);
        return Status{};
      case BoundarySourceReady:
        return boundary_ready(me, rank, run);
      case Execution:
        // Ranks before the output owner ran their units at their route's
        // completion; the output owner runs its own and the head now.
        if (!owner) return Status{};
        if (const auto* execution = std::get_if<ExecutionArguments>(&run.arguments)) {
          return worker.run_units(execution->all_rows ? OutputRows::all : OutputRows::last);
        }
        return malformed("execution");
      case OutputObservation:
        if (!owner || !worker.step_has_observer()) return Status{};
        return worker.observe_output();
      case OutputPublication:
        if (owner) send_to_driver(StepOutput{session, epoch, to_wire(worker.published_output())});
        return Status{};
      case PredictionTargetCapture:
        if (!owner) return Status{};
        if (const auto* draft = std::get_if<DraftTokens>(&run.arguments)) {
          return worker.capture_prediction_target(draft->count);
        }
        return malformed("draft");
      case PredictionTargetCapturePublication:
        return capture_publication(me, rank, run);
      case PredictionTargetStatePreparation:
        if (const auto* draft = std::get_if<DraftTokens>(&run.arguments)) {
          return worker.prepare_prediction_target_state(draft->count);
        }
        return malformed("draft");
      case PredictionExtensionExecution:
        return worker.apply_prediction_target_operation();
      case SamplingSynchronization:
        return sampling(me, rank, run);
      case SessionCheckpoint: {
        const RankCheckpoint cp = worker.checkpoint();
        send_to_driver(RankCheckpointReport{session, epoch, me, cp.position, cp.state_epoch, cp.reset_epoch, cp.digest});
        return Status{};
      }
      case SessionRollbackPreparation:
        if (const auto* target = std::get_if<RollbackTarget>(&run.arguments)) {
          return worker.prepare_rollback(epoch, {target->position, target->state_epoch, target->reset_epoch, ""});
        }
        return malformed("rollback");
      case SessionResetPreparation:
        return worker.prepare_reset(epoch);
      case PromptCacheSavePreflight:
      case PromptCacheSavePreparation:
      case PromptCacheSavePublication:
      case PromptCacheLoadPreflight:
      case PromptCacheLoadPreparation:
        return prompt_cache(me, rank, run);
      default:
        // No local work of its own (MechanismCompletion: CPU work completes
        // synchronously; Commit: applied on the decision).
        return Status{};
    }
  }

  // BoundarySourceReady: the source sends its activations (the route's
  // completion was agreed); the target takes them once they are here.
  std::optional<Status> boundary_ready(RankId me, DirectRank& rank, const RunPhase& run) {
    const CommunicationRouteId& route = run.phase.route;
    if (route.source == me) {
      if (route.target >= ranks.size()) {
        return Error(ErrorCode::contract, "no rank " + std::to_string(route.target) + " to send activations to");
      }
      queue.push_back(
          {route.target, ToRank(PeerData(RouteTransfer{session, run.epoch, route,
                                                       to_wire(rank.worker.outgoing_activations())}))});
      return Status{};
    }
    if (route.target != me) return Status{};
    if (!holds_for(rank.activations, run)) return std::nullopt;
    const RowBlock block = from_wire(rank.activations->activations);
    rank.activations.reset();
    return rank.worker.receive_activations(block);
  }

  // PredictionTargetCapturePublication: the output owner shares its
  // capture and verdict; every other rank holds them once they are here.
  std::optional<Status> capture_publication(RankId me, DirectRank& rank, const RunPhase& run) {
    if (!rank.worker.is_output_owner()) {
      if (!holds_for(rank.capture, run)) return std::nullopt;
      return rank.worker.exchange_prediction_target_state(received_capture(*rank.capture));
    }
    auto capture = published_capture(rank.worker);
    if (!capture) return capture.error();
    capture->session = session;
    capture->epoch = run.epoch;
    share_with_every_rank(me, *capture);
    return Status{};
  }

  // SamplingSynchronization: the output owner samples and shares its pick;
  // every other rank holds it once it is here.
  std::optional<Status> sampling(RankId me, DirectRank& rank, const RunPhase& run) {
    if (!rank.worker.is_output_owner()) {
      if (!holds_for(rank.sampled, run)) return std::nullopt;
      return Status{};
    }
    const auto* arguments = std::get_if<SamplingArguments>(&run.arguments);
    if (arguments == nullptr) return malformed("sampling");
    auto sampled = sample_on(rank.worker, *arguments);
    if (!sampled) return sampled.error();
    sampled->session = session;
    sampled->epoch = run.epoch;
    share_with_every_rank(me, *sampled);
    return Status{};
  }

  // The prompt-cache phases: the state's part (RankWorker), then the files'
  // (RankPromptCache).
  Status prompt_cache(RankId me, DirectRank& rank, const RunPhase& run) {
    const Epoch epoch = run.epoch;
    if (run.phase.phase == PromptCacheSavePublication) return rank.cache.publish(epoch);
    const auto* a = std::get_if<PromptCacheArguments>(&run.arguments);
    if (a == nullptr) return malformed("prompt cache");
    switch (run.phase.phase) {
      case PromptCacheSavePreflight:
        return rank.worker.check_prefix_held(a->prefix);
      case PromptCacheSavePreparation:
        return rank.cache.prepare_save(epoch, to_request(*a), a->save_id,
                                       rank.worker.pack_shard(static_cast<int>(a->prefix.size())));
      case PromptCacheLoadPreflight: {
        auto save_id = rank.cache.begin_load(epoch, to_request(*a));
        if (!save_id) return save_id.error();
        send_to_driver(PromptCacheReport{session, epoch, me, *save_id});
        return Status{};
      }
      default: {  // PromptCacheLoadPreparation
        auto shard = rank.cache.read_load(epoch, a->save_id);
        if (!shard) return shard.error();
        return rank.worker.prepare_load(epoch, a->prefix, std::move(*shard));
      }
    }
  }

  const Model& model;
  std::shared_ptr<cpu::ThreadPool> pool;
  Partition partition;
  std::string model_identity;
  SessionId session;
  DirectEngineOptions options;
  TransactionDriver driver;
  std::vector<std::unique_ptr<DirectRank>> ranks;
  std::deque<Envelope> queue;
  std::vector<Delayed> delayed;
  std::shared_ptr<StepObserver> observer;
  PhaseHook hook;
  std::uint64_t now = 0;  // ticks passed
};

DirectEngine::DirectEngine(const Model& model, std::shared_ptr<cpu::ThreadPool> pool, const Partition& partition,
                           const std::string& model_identity, SessionId session, DirectEngineOptions options)
    : state_(std::make_unique<State>(model, std::move(pool), partition, model_identity, session, std::move(options))) {}

DirectEngine::~DirectEngine() = default;

TransactionReply DirectEngine::run(const TransactionRequest& request) { return state_->run(request); }

void DirectEngine::lend_observer(std::shared_ptr<StepObserver> observer) {
  state_->observer = observer;
  for (auto& rank : state_->ranks) rank->worker.lend_observer(observer);
}

void DirectEngine::set_phase_hook(PhaseHook hook) { state_->hook = std::move(hook); }

Status DirectEngine::inject_faults(const std::vector<Fault>& plan) {
  if (Status ok = check_fault_plan(plan, ranks()); !ok) return ok;
  for (std::size_t r = 0; r < state_->ranks.size(); ++r) {
    state_->ranks[r]->faults = RankFaults(static_cast<RankId>(r), plan);
  }
  return {};
}

int DirectEngine::ranks() const { return static_cast<int>(state_->ranks.size()); }

const RankWorker& DirectEngine::worker(int rank) const {
  return state_->ranks.at(static_cast<std::size_t>(rank))->worker;
}

bool DirectEngine::poisoned() const { return state_->driver.agreement().poisoned(); }

}  // namespace accord
