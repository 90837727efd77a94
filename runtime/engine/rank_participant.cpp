#include "runtime/engine/rank_participant.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "runtime/base/assert.hpp"
#include "runtime/engine/transaction_driver.hpp"

namespace accord {

namespace {

using enum DistributedExecutionPhase;

template <class Data>
bool holds_for(const std::optional<Data>& data, const RunPhase& run) {
  return data && data->epoch == run.epoch;
}

}  // namespace

RankParticipant::RankParticipant(std::shared_ptr<RankWorker> worker, SessionId session, RankId rank_count,
                                 const std::vector<Fault>& plan, RankOutbox& outbox, Env& env)
    : worker_(std::move(worker)),
      cache_(worker_->shard_identity(), env),
      machine_(session, static_cast<RankId>(worker_->rank())),
      session_(session),
      rank_(static_cast<RankId>(worker_->rank())),
      rank_count_(rank_count),
      outbox_(outbox),
      faults_(rank_, plan) {
  ACCORD_ASSERT(rank_ < rank_count_, "a rank's index is below the session's rank count");
}

void RankParticipant::set_faults(const std::vector<Fault>& plan) { faults_ = RankFaults(rank_, plan); }

// --- what arrives ------------------------------------------------------------

void RankParticipant::receive(const PhaseBegin& begin) {
  if (exited_) return;
  machine_.step(begin);
  pump();
}

void RankParticipant::receive(const PhaseDecision& decision) {
  if (exited_) return;
  machine_.step(decision);
  pump();
  if (decision.decision == Decision::abort || decision.decision == Decision::poison) stop_waiting(decision.epoch);
}

void RankParticipant::receive(PeerData data) {
  if (exited_) return;
  const auto [session, epoch] = std::visit([](const auto& d) { return std::pair(d.session, d.epoch); }, data);
  if (session != session_) return dropped_data_.count(DropReason::other_session);
  if (epoch < machine_.epoch()) return dropped_data_.count(DropReason::stale_epoch);
  std::visit([&](auto& d) { keep(std::move(d)); }, data);
  if (!waiting_) return;
  const RunPhase run = std::move(*waiting_);
  waiting_.reset();
  run_guarded(run);
}

void RankParticipant::run_held_back(Epoch epoch) {
  if (exited_ || !held_back_ || held_back_->epoch != epoch) return;
  const RunPhase run = std::move(*held_back_);
  held_back_.reset();
  run_guarded(run);
}

// --- the machine's actions -----------------------------------------------------

// A phase that finishes pumps again from inside carry_out, so each level
// takes into a RankReady of its own; they are kept for the next step.
void RankParticipant::pump() {
  RankReady ready;
  if (!spare_ready_.empty()) {
    ready = std::move(spare_ready_.back());
    spare_ready_.pop_back();
  }
  machine_.take_ready(ready);
  for (auto& message : ready.messages) {
    if (marks_.lose(message)) continue;
    std::visit([&](auto& m) { outbox_.to_coordinator(std::move(m)); }, message);
  }
  for (const auto& action : ready.actions) {
    if (exited_) break;
    carry_out(action);
  }
  spare_ready_.push_back(std::move(ready));
}

void RankParticipant::carry_out(const RankAction& action) {
  if (const auto* run = std::get_if<RunPhase>(&action)) {
    run_phase(*run);
  } else if (const auto* commit = std::get_if<CommitTransaction>(&action)) {
    ACCORD_ASSERT(commit->epoch == machine_.epoch(), "a rank commits the transaction its machine has open");
    forget_step(commit->epoch);
    worker_->commit(commit->epoch);
    cache_.commit(commit->epoch);
  } else if (const auto* restore = std::get_if<RestoreCheckpoint>(&action)) {
    this->restore(restore->epoch);
  } else if (std::holds_alternative<MarkPoisoned>(action)) {
    forget_step(machine_.epoch());
    worker_->forget_open_transaction();
    cache_.forget();
  }
}

// Abort: the state, then the cache's publication; the rank has restored
// only when both have.
void RankParticipant::restore(Epoch epoch) {
  ACCORD_ASSERT(epoch == machine_.epoch(), "a rank restores the checkpoint of the transaction its machine has open");
  forget_step(epoch);
  const Status state = worker_->restore(epoch);
  const Status cache = cache_.revert(epoch);
  if (state && cache) {
    machine_.restored(epoch);
  } else {
    machine_.restore_failed(epoch, (state ? cache : state).error().message());
  }
  pump();
}

// What came for a later step stays: another rank that already runs it
// may send its data over a link that overtakes this step's decision (node
// to node, where the decision comes from the coordinator's process).
void RankParticipant::forget_step(Epoch epoch) {
  const auto forget = [epoch](auto& data) {
    if (data && data->epoch <= epoch) data.reset();
  };
  forget(activations_);
  forget(expert_wait_);
  forget(serving_);
  std::erase_if(expert_rows_, [epoch](const ExpertTransfer& rows) { return rows.epoch <= epoch; });
  forget(sampled_);
  forget(capture_);
  forget(waiting_);
}

// An abort or a poison ends a phase waiting for another rank's data (which
// may never come): nothing of it touched the state, so the wait ends with
// a failure and the rank restores or forgets.
void RankParticipant::stop_waiting(Epoch epoch) {
  if (!waiting_ || waiting_->epoch != epoch) return;
  const RunPhase run = *waiting_;
  waiting_.reset();
  finish(run, Error(ErrorCode::mechanism, "stopped waiting for another rank's data: the phase was decided"));
}

// --- local work -------------------------------------------------------------------

// Runs the phase's local part, unless the fault plan has a fault fire now.
void RankParticipant::run_phase(const RunPhase& run) {
  const auto fault = faults_.on_phase(run.phase);
  if (!fault) return run_guarded(run);
  const std::string what = injected_fault_message(*fault, static_cast<int>(rank_), run.phase);
  switch (*fault) {
    case FaultKind::error: return finish(run, Error(ErrorCode::mechanism, what));
    case FaultKind::throws: return run_guarded(run, what);
    case FaultKind::delay: held_back_ = run; return outbox_.hold_back(run.epoch);
    case FaultKind::exit: exited_ = true; return outbox_.exit();
    case FaultKind::drop:
    case FaultKind::corrupt: marks_.mark(*fault, run); return run_guarded(run);
  }
}

// An exception out of the local part fails the phase; `injected` throws one
// first. A phase waiting for another rank's data runs again when it comes.
void RankParticipant::run_guarded(const RunPhase& run, const std::string& injected) {
  std::optional<Status> result;
  const auto started = std::chrono::steady_clock::now();
  Status ran = status_of([&] {
    if (!injected.empty()) throw std::runtime_error(injected);
    result = local_work(run);
    return Status{};
  });
  if (!ran) return finish(run, std::move(ran));
  if (!result) {
    waiting_ = run;
    return;
  }
  if (timer_) timer_(run.phase, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  finish(run, std::move(*result));
}

void RankParticipant::finish(const RunPhase& run, Status status) {
  if (status && marks_.corrupt_after(run)) status = cache_.corrupt_shard(run.epoch);
  if (status && hook_) status = status_of([&] { return hook_(rank_, run.phase, run.epoch); });
  if (status) {
    machine_.phase_done(run.epoch, run.phase);
  } else {
    machine_.phase_failed(run.epoch, run.phase, to_failure_code(status.error().code()), status.error().message());
  }
  pump();
}

// The rank's local part of `run`; nullopt while it waits for another rank's data.
std::optional<Status> RankParticipant::local_work(const RunPhase& run) {
  RankWorker& worker = *worker_;
  const bool owner = worker.is_output_owner();
  const Epoch epoch = run.epoch;
  switch (run.phase.phase) {
    case StateCheckpoint:
      if (const auto* step = std::get_if<StepTokens>(&run.arguments)) return worker.begin_step(epoch, step->tokens);
      return malformed("token");
    case BoundarySourceCompletion:
      if (run.phase.route.kind == RouteKind::experts) return expert_route(run);
      if (run.phase.route.source == rank_) return worker.run_units(OutputRows::none);
      return Status{};
    case BoundarySourceReady: return boundary_ready(run);
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
    case OutputPublication: return publication(run);
    case PredictionTargetCapture:
      if (!owner) return Status{};
      if (const auto* draft = std::get_if<DraftTokens>(&run.arguments)) {
        return worker.capture_prediction_target(draft->count);
      }
      return malformed("draft");
    case PredictionTargetCapturePublication: return capture_publication(run);
    case PredictionTargetStatePreparation:
      if (const auto* draft = std::get_if<DraftTokens>(&run.arguments)) {
        return worker.prepare_prediction_target_state(draft->count);
      }
      return malformed("draft");
    case PredictionExtensionExecution: return worker.apply_prediction_target_operation();
    case SamplingSynchronization: return sampling(run);
    case SessionCheckpoint:
      if (const auto* snapshot = std::get_if<SnapshotTarget>(&run.arguments)) {
        if (Status ok = worker.prepare_snapshot(epoch, snapshot->id); !ok) return ok;
      }
      return report_checkpoint(epoch);
    case SessionRollbackPreparation:
      if (const auto* target = std::get_if<RollbackTarget>(&run.arguments)) {
        return worker.prepare_rollback(epoch, {target->position, target->state_epoch, target->reset_epoch, ""});
      }
      if (const auto* snapshot = std::get_if<SnapshotTarget>(&run.arguments)) {
        return worker.prepare_snapshot_restore(epoch, snapshot->id);
      }
      return malformed("rollback");
    case SessionResetPreparation:
      // A reset may skip over a transaction this rank never saw settled:
      // a save it left open lets go of its lock (RankPromptCache::abandon).
      cache_.abandon();
      return worker.prepare_reset(epoch);
    case PromptCacheSavePreflight:
    case PromptCacheSavePreparation:
    case PromptCacheSavePublication:
    case PromptCacheLoadPreflight:
    case PromptCacheLoadPreparation: return prompt_cache(run);
    default:
      // No local work of its own (MechanismCompletion: CPU work completes
      // synchronously; Commit: applied on the decision).
      return Status{};
  }
}

// SessionCheckpoint: the rank's checkpoint goes to the coordinator, which
// gathers every rank's into the transaction's reply.
Status RankParticipant::report_checkpoint(Epoch epoch) {
  const RankCheckpoint cp = worker_->checkpoint();
  outbox_.to_coordinator(
      RankCheckpointReport{session_, epoch, rank_, cp.position, cp.state_epoch, cp.reset_epoch, cp.digest});
  return Status{};
}

// BoundarySourceReady: the source sends its activations (the route's
// completion was agreed); the target takes them once they are here.
std::optional<Status> RankParticipant::boundary_ready(const RunPhase& run) {
  const CommunicationRouteId& route = run.phase.route;
  // An expert route's rows all crossed in its completion.
  if (route.kind == RouteKind::experts) return Status{};
  if (route.source == rank_) {
    if (route.target >= rank_count_) {
      return Error(ErrorCode::contract, "no rank " + std::to_string(route.target) + " to send activations to");
    }
    outbox_.to_rank(route.target, RouteTransfer{session_, run.epoch, route, to_wire(worker_->outgoing_activations())});
    return Status{};
  }
  if (route.target != rank_) return Status{};
  if (!holds_for(activations_, run)) return std::nullopt;
  RowBlock block = from_wire(std::move(activations_->activations));
  activations_.reset();
  return worker_->receive_activations(std::move(block));
}

// BoundarySourceCompletion of an expert route from a stage to a helper:
// the stage runs its units, sending each unit's rows to its helpers and
// waiting for their outputs (its first route's phase does all of that;
// the others find the units ran); the helper serves each unit's rows.
std::optional<Status> RankParticipant::expert_route(const RunPhase& run) {
  const CommunicationRouteId& route = run.phase.route;
  if (route.source >= rank_count_ || route.target >= rank_count_) {
    return Error(ErrorCode::contract, "no expert route " + to_string(route) + " in a session of " +
                                          std::to_string(rank_count_) + " rank(s)");
  }
  if (route.source == rank_) return run_with_experts(run);
  if (route.target == rank_) return serve_experts(run);
  return Status{};
}

std::optional<Status> RankParticipant::run_with_experts(const RunPhase& run) {
  RankWorker& worker = *worker_;
  for (;;) {
    if (expert_wait_) {
      auto& helpers = expert_wait_->helpers;
      while (!helpers.empty()) {
        auto outputs = take_expert_rows(run.epoch, static_cast<RankId>(helpers.front()), expert_wait_->unit);
        if (!outputs) return std::nullopt;
        if (Status ok = worker.accept_experts(helpers.front(), outputs->rows.data); !ok) return ok;
        helpers.erase(helpers.begin());
      }
      expert_wait_.reset();
    }
    auto round = worker.advance_units();
    if (!round) return round.error();
    if (!*round) return Status{};
    ExpertWait wait{run.epoch, (*round)->unit, {}};
    for (auto& [helper, request] : (*round)->requests) {
      wait.helpers.push_back(helper);
      send_expert_rows(run.epoch, static_cast<RankId>(helper), wait.unit, std::move(request.experts),
                       std::move(request.rows));
    }
    expert_wait_ = std::move(wait);
  }
}

std::optional<Status> RankParticipant::serve_experts(const RunPhase& run) {
  const RankId stage = run.phase.route.source;
  const UnitRange& units = worker_->units_of(static_cast<int>(stage));
  if (!serving_ || serving_->epoch != run.epoch || serving_->stage != stage) {
    serving_ = Serving{run.epoch, stage, units.first};
  }
  for (; serving_->next_unit < units.end(); ++serving_->next_unit) {
    const int unit = serving_->next_unit;
    auto dispatch = take_expert_rows(run.epoch, stage, unit);
    if (!dispatch) return std::nullopt;
    std::vector<int> experts(dispatch->experts.begin(), dispatch->experts.end());
    auto outputs = worker_->serve_experts(unit, experts, dispatch->rows.data);
    if (!outputs) return outputs.error();
    send_expert_rows(run.epoch, stage, unit, {}, std::move(*outputs));
  }
  return Status{};
}

std::optional<ExpertTransfer> RankParticipant::take_expert_rows(Epoch epoch, RankId source, int unit) {
  auto it = std::find_if(expert_rows_.begin(), expert_rows_.end(), [&](const ExpertTransfer& rows) {
    return rows.epoch == epoch && rows.route.source == source && rows.route.target == rank_ && rows.unit == unit;
  });
  if (it == expert_rows_.end()) return std::nullopt;
  ExpertTransfer taken = std::move(*it);
  expert_rows_.erase(it);
  return taken;
}

void RankParticipant::send_expert_rows(Epoch epoch, RankId target, int unit, std::vector<int> experts,
                                       std::vector<float> rows) {
  const auto dim = static_cast<std::int64_t>(worker_->config().dim);
  ExpertTransfer transfer{session_, epoch, {rank_, target, RouteKind::experts}, unit, {}, {}};
  transfer.experts.assign(experts.begin(), experts.end());
  transfer.rows.shape = {static_cast<std::int64_t>(rows.size()) / dim, dim};
  transfer.rows.data = std::move(rows);
  outbox_.to_rank(target, std::move(transfer));
}

// OutputPublication: the output owner sends the caller its logits, or an
// empty block where the caller wants none.
std::optional<Status> RankParticipant::publication(const RunPhase& run) {
  if (!worker_->is_output_owner()) return Status{};
  const auto* arguments = std::get_if<PublicationArguments>(&run.arguments);
  if (arguments == nullptr) return malformed("publication");
  outbox_.to_coordinator(
      StepOutput{session_, run.epoch, to_wire(arguments->logits ? worker_->published_output() : RowBlock{})});
  return Status{};
}

// PredictionTargetCapturePublication: the output owner shares its capture
// and verdict; every other rank holds them once they are here.
std::optional<Status> RankParticipant::capture_publication(const RunPhase& run) {
  if (!worker_->is_output_owner()) {
    if (!holds_for(capture_, run)) return std::nullopt;
    return worker_->exchange_prediction_target_state(received_capture(*capture_));
  }
  auto capture = published_capture(*worker_);
  if (!capture) return capture.error();
  capture->session = session_;
  capture->epoch = run.epoch;
  share_with_every_rank(*capture);
  return Status{};
}

// SamplingSynchronization: the output owner samples from the output it
// published and shares its pick; every other rank holds it once it is here.
std::optional<Status> RankParticipant::sampling(const RunPhase& run) {
  if (!worker_->is_output_owner()) {
    if (!holds_for(sampled_, run)) return std::nullopt;
    return Status{};
  }
  const auto* arguments = std::get_if<SamplingArguments>(&run.arguments);
  if (arguments == nullptr) return malformed("sampling");
  auto sampled = sample_on(*worker_, *arguments);
  if (!sampled) return sampled.error();
  sampled->session = session_;
  sampled->epoch = run.epoch;
  share_with_every_rank(*sampled);
  return Status{};
}

// What the output owner publishes goes to every other rank and the coordinator.
template <class Message>
void RankParticipant::share_with_every_rank(const Message& message) {
  ACCORD_ASSERT(worker_->is_output_owner(), "only the output owner shares what it published");
  for (RankId r = 0; r < rank_count_; ++r) {
    if (r != rank_) outbox_.to_rank(r, message);
  }
  outbox_.to_coordinator(message);
}

// The prompt-cache phases: the state's part (RankWorker), then the files'
// (RankPromptCache).
Status RankParticipant::prompt_cache(const RunPhase& run) {
  const Epoch epoch = run.epoch;
  if (run.phase.phase == PromptCacheSavePublication) return cache_.publish(epoch);
  const auto* a = std::get_if<PromptCacheArguments>(&run.arguments);
  if (a == nullptr) return malformed("prompt cache");
  switch (run.phase.phase) {
    case PromptCacheSavePreflight: return worker_->check_prefix_held(a->prefix);
    case PromptCacheSavePreparation: {
      auto request = cache_request(*a);
      if (!request) return request.error();
      // Checked again: the preflight's word is the coordinator's, and a
      // prefix past what the rank holds would read rows it never wrote.
      if (Status held = worker_->check_prefix_held(a->prefix); !held) return held;
      return cache_.prepare_save(epoch, *request, a->save_id, worker_->pack_shard(static_cast<int>(a->prefix.size())));
    }
    case PromptCacheLoadPreflight: {
      auto request = cache_request(*a);
      if (!request) return request.error();
      auto save_id = cache_.begin_load(epoch, *request);
      if (!save_id) return save_id.error();
      outbox_.to_coordinator(PromptCacheReport{session_, epoch, rank_, *save_id});
      return Status{};
    }
    default: {  // PromptCacheLoadPreparation
      auto shard = cache_.read_load(epoch, a->save_id);
      if (!shard) return shard.error();
      return worker_->prepare_load(epoch, a->prefix, std::move(*shard));
    }
  }
}

void RankParticipant::confine_prompt_caches(std::optional<std::filesystem::path> folder) {
  confined_ = true;
  cache_folder_ = std::move(folder);
}

Result<PromptCacheRequest> RankParticipant::cache_request(const PromptCacheArguments& arguments) const {
  PromptCacheRequest request = to_request(arguments);
  if (!confined_) return request;
  if (!cache_folder_) {
    return Error(ErrorCode::prompt_cache, "this node keeps no prompt cache (start it with --prompt-cache-dir)");
  }
  auto root = entry_in(*cache_folder_, arguments.root, "a remote prompt cache");
  if (!root) return root.error();
  request.root = std::move(*root);
  return request;
}

// --- reports ------------------------------------------------------------------------

RankStateReport RankParticipant::state_report() const {
  const SessionState& state = worker_->state();
  const KvStore& kv = state.kv();
  RankStateReport report;
  report.digest = state.digest();
  report.position = state.position();
  report.state_epoch = state.state_epoch();
  report.kv_bytes_used = state.used_bytes();
  report.kv_bytes_capacity = kv.capacity_bytes();
  report.kv_held_bytes = kv.held_bytes();
  report.high_water = state.high_water();
  report.kv_materialized_bytes = kv.position_bytes() * static_cast<std::uint64_t>(state.high_water());
  report.compute_seconds = worker_->compute_seconds();
  report.weights = worker_->weight_share();
  const KvImageCost snapshot = kv.freeze_cost(state.position());
  report.snapshot_copied_bytes = snapshot.copied_bytes;
  report.snapshot_shared_bytes = snapshot.shared_bytes;
  report.snapshot_copy_on_write_bytes = snapshot.copy_on_write_bytes;
  report.expert_rows = worker_->expert_rows();
  return report;
}

DroppedMessages RankParticipant::dropped() const {
  DroppedMessages dropped = machine_.dropped();
  dropped += dropped_data_;
  return dropped;
}

}  // namespace accord
