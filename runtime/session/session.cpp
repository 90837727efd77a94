#include "runtime/session/session.hpp"

#include <random>

#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/engine/direct_engine.hpp"
#include "runtime/engine/session_requests.hpp"
#include "runtime/engine/transaction_driver.hpp"
#include "runtime/model/identity.hpp"
#include "runtime/rank/partition.hpp"
#include "runtime/rank/snapshot_shelf.hpp"

namespace accord {

namespace {

std::uint64_t random_u64() {
  std::random_device random;
  return (static_cast<std::uint64_t>(random()) << 32) | random();
}

Error before_mutation(const Error& error) { return std::move(Error(error).mark_before_state_mutation()); }

// The engine shares ownership of its pool; a Session borrows the caller's.
std::shared_ptr<cpu::ThreadPool> borrowed(cpu::ThreadPool& pool) {
  return std::shared_ptr<cpu::ThreadPool>(std::shared_ptr<void>{}, &pool);
}

}  // namespace

struct Session::Impl {
  Impl(const Model& m, std::shared_ptr<cpu::ThreadPool> compute, const StageOptions& stage_options)
      : model(m),
        model_identity(accord::model_identity(m)),
        session_id(random_u64()),
        pool(std::move(compute)),
        stage(stage_options),
        engine(m, pool, Partition::balanced(m.config().n_layers, 1).value(), model_identity, session_id,
               DirectEngineOptions{{}, {}, nullptr, stage}) {}

  const SessionState& state() const { return engine.worker(0).state(); }

  // Runs one transaction on the engine and records how it ended; a reply
  // that did not commit becomes its Error.
  Result<TransactionReply> transact(const TransactionRequest& request) {
    auto settled = settle(record, request.kind(), engine.run(request));
    if (!settled && settled.error().poison()) poison = settled.error().poison();
    return settled;
  }

  std::vector<WeightShare> weight_shares() const {
    std::vector<WeightShare> shares;
    for (int r = 0; r < engine.ranks(); ++r) shares.push_back(engine.worker(r).weight_share());
    return shares;
  }

  const Model& model;
  std::string model_identity;
  std::uint64_t session_id;
  std::shared_ptr<cpu::ThreadPool> pool;
  StageOptions stage;   // what a fork computes with too
  DirectEngine engine;  // one rank
  TransactionRecord record;
  std::optional<Poison> poison;
  PreparedInputRecord prepared;  // cleared when the state no longer holds its tokens
  // The last step's output: logits (rows, vocab) and, of a
  // prediction-target step, its capture.
  std::vector<float> published;
  std::vector<float> capture;
};

Session::Session(const Model& model, const SessionOptions& options)
    : impl_(std::make_unique<Impl>(model, std::make_shared<cpu::ThreadPool>(options.threads), options.stage)) {}
Session::Session(const Model& model, cpu::ThreadPool& pool, const StageOptions& stage)
    : impl_(std::make_unique<Impl>(model, borrowed(pool), stage)) {}
Session::Session(const Model& model, std::shared_ptr<cpu::ThreadPool> pool, const StageOptions& stage)
    : impl_(std::make_unique<Impl>(model, std::move(pool), stage)) {}
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::~Session() = default;

std::uint64_t Session::successful_state_restoration_generation() const { return impl_->record.restoration_generation; }
const std::optional<Poison>& Session::poison() const { return impl_->poison; }
const Model& Session::model() const { return impl_->model; }
const std::string& Session::model_identity() const { return impl_->model_identity; }
int Session::position() const { return impl_->state().position(); }
std::span<const int> Session::tokens() const { return impl_->state().tokens(); }
std::string Session::state_digest() const { return impl_->state().digest(); }
void Session::set_phase_timer(PhaseTimer timer) { impl_->engine.set_phase_timer(std::move(timer)); }
void Session::batch_steps_with(StepBatcher* batcher) { impl_->engine.lend_batcher(batcher); }
Status Session::inject_faults(const std::vector<Fault>& plan) { return impl_->engine.inject_faults(plan); }

void Session::set_failure_hook(FailureHook hook) {
  if (!hook) return impl_->engine.set_phase_hook({});
  impl_->engine.set_phase_hook(
      [hook = std::move(hook)](RankId, const PhaseId& phase, Epoch epoch) { return hook(phase.phase, epoch); });
}

// ---------------------------------------------------------------------------
// Forward steps: the phases of transaction_plan.hpp's forward step on one
// rank: StateCheckpoint, Execution, OutputObservation,
// [PredictionTargetCapture, PredictionTargetCapturePublication,
// PredictionTargetStatePreparation, PredictionExtensionExecution,]
// OutputPublication, MechanismCompletion, Commit.

Result<StepResult> Session::step(const StepOptions& options) {
  if (impl_->poison) return Error::poisoned(*impl_->poison);
  const int first = position();
  if (Status ok = check_step(impl_->model.config(), options, first); !ok) return before_mutation(ok.error());
  // A draft is verified against every row's logits.
  const bool all_rows = options.all_rows || (options.prediction_target && options.draft_tokens > 0);
  const int draft_tokens = options.prediction_target ? options.draft_tokens : -1;
  // The observer is the caller's for this call only.
  if (options.observer) impl_->engine.lend_observer(options.observer);
  auto reply = impl_->transact(step_request(options.tokens, all_rows, draft_tokens));
  if (options.observer) impl_->engine.lend_observer(nullptr);
  if (!reply) return reply.error();
  impl_->published = std::move(reply->logits.data);
  impl_->capture = std::move(reply->prediction_target.hidden.data);
  const int kept =
      options.prediction_target ? reply->prediction_target.kept_rows : static_cast<int>(options.tokens.size());
  const int rows = static_cast<int>(impl_->published.size()) / impl_->model.config().vocab_size;
  StepResult result{reply->epoch,
                    first + kept - rows,
                    rows,
                    impl_->published,
                    impl_->capture,
                    reply->prediction_target.accepted,
                    reply->prediction_target.next_token,
                    {}};
  if (options.sampler != nullptr) {
    const auto vocab = static_cast<std::size_t>(impl_->model.config().vocab_size);
    result.sampled = sample_token(*options.sampler, result.logits.last(vocab), options.stop_tokens);
  }
  return result;
}

// ---------------------------------------------------------------------------
// Checkpoints, rollback, reset.

Result<SessionCheckpoint> Session::checkpoint() {
  if (impl_->poison) return Error::poisoned(*impl_->poison);
  const TransactionRequest request{CheckpointRequest{}};
  auto reply = impl_->transact(request);
  if (!reply) return reply.error();
  if (reply->checkpoints.size() != 1) return Error(ErrorCode::mechanism, "the rank reported no checkpoint");
  const RankCheckpointReport& cp = reply->checkpoints.front();
  return SessionCheckpoint{impl_->session_id, cp.reset_epoch, cp.position, cp.state_epoch, cp.digest};
}

Result<CompleteCheckpoint> Session::checkpoint_complete() {
  auto state = checkpoint();
  if (!state) return state.error();
  return CompleteCheckpoint{*state, committed_prompt_input_identity()};
}

Status Session::rollback(const SessionCheckpoint& checkpoint) {
  if (impl_->poison) return Error::poisoned(*impl_->poison);
  if (checkpoint.session_id != impl_->session_id) {
    return before_mutation(Error(ErrorCode::state, "the checkpoint belongs to another session"));
  }
  auto reply = impl_->transact(rollback_request(checkpoint.position, checkpoint.state_epoch, checkpoint.reset_epoch));
  if (!reply) return reply.error();
  impl_->prepared.keep_within(position());
  return {};
}

Status Session::truncate(int position) {
  if (Status ok = check_truncation(position, this->position()); !ok) return before_mutation(ok.error());
  auto here = checkpoint();
  if (!here) return here.error();
  SessionCheckpoint back = *here;
  back.position = position;
  back.digest.clear();  // of no state: `back` is only handed to rollback
  return rollback(back);
}

Status Session::rollback_complete(const CompleteCheckpoint& checkpoint) {
  if (Status ok = check_prompt_matches_position(checkpoint.prompt, checkpoint.state.position); !ok) return ok;
  if (Status s = rollback(checkpoint.state); !s) return s;
  impl_->prepared.restore(checkpoint.prompt);
  return {};
}

Status Session::reset() {
  const TransactionRequest request{ResetRequest{}};
  auto reply = impl_->transact(request);
  if (!reply) return reply.error();
  impl_->prepared.clear();
  impl_->poison.reset();
  return {};
}

// ---------------------------------------------------------------------------
// Snapshots: SessionCheckpoint and SessionRollbackPreparation with the
// snapshot's id (runtime/rank/snapshot_shelf.hpp).

Result<SessionSnapshot> Session::snapshot() {
  if (impl_->poison) return Error::poisoned(*impl_->poison);
  const std::uint64_t id = SnapshotShelf::new_id();
  auto hold = SnapshotShelf::process().hold(id);  // an aborted snapshot shelves nothing; a committed one goes with it
  auto reply = impl_->transact({SnapshotRequest{id}});
  if (!reply) return reply.error();
  return SessionSnapshot{id,
                         impl_->model_identity,
                         std::vector<int>(tokens().begin(), tokens().end()),
                         committed_prompt_input_identity(),
                         content_digest(),
                         std::move(hold)};
}

SnapshotEstimate Session::estimate_snapshot() const {
  const KvImageCost cost = impl_->state().kv().freeze_cost(position());
  return {cost.copied_bytes, cost.shared_bytes, cost.copy_on_write_bytes};
}

Status Session::restore(const SessionSnapshot& snapshot) {
  if (impl_->poison) return Error::poisoned(*impl_->poison);
  if (snapshot.model_identity != impl_->model_identity) {
    return before_mutation(Error(ErrorCode::state, "the snapshot was taken of another model"));
  }
  auto reply = impl_->transact({SnapshotRestoreRequest{snapshot.id}});
  if (!reply) return reply.error();
  impl_->prepared.restore(snapshot.prompt);
  return {};
}

Result<Session> Session::fork(const SessionSnapshot& snapshot) const {
  Session forked(impl_->model, impl_->pool, impl_->stage);
  if (Status ok = forked.restore(snapshot); !ok) return ok.error();
  return forked;
}

std::string Session::content_digest() const { return impl_->state().content_digest(); }

// ---------------------------------------------------------------------------
// Prompt cache: the rank's shard (prompt_cache_shard.hpp) inside one transaction.

Result<PromptCacheSaveResult> Session::save_prompt_cache(const std::filesystem::path& root,
                                                         const PromptCacheDescriptor& descriptor,
                                                         std::span<const int> prefix) {
  return save(root, descriptor, prefix, "");
}

Result<PromptCacheSaveResult> Session::save_prompt_cache_for_input(const std::filesystem::path& root,
                                                                   const PromptCacheDescriptor& descriptor,
                                                                   std::span<const int> prefix,
                                                                   const std::string& prepared_input) {
  if (Status ok = check_prepared_input_named(prepared_input); !ok) return ok.error();
  return save(root, descriptor, prefix, prepared_input);
}

Result<PromptCacheSaveResult> Session::save(const std::filesystem::path& root, const PromptCacheDescriptor& descriptor,
                                            std::span<const int> prefix, const std::string& prepared_input) {
  if (impl_->poison) return Error::poisoned(*impl_->poison);
  const TransactionRequest request =
      cache_request(TransactionKind::prompt_cache_save, root, descriptor, prefix, prepared_input);
  auto reply = impl_->transact(request);
  if (!reply) return reply.error();
  return save_result(impl_->model.config(), request, *reply);
}

Status Session::load_prompt_cache(const std::filesystem::path& root, const PromptCacheDescriptor& expected,
                                  std::span<const int> prefix) {
  return load(root, expected, prefix, "");
}

Status Session::load_prompt_cache_for_input(const std::filesystem::path& root, const PromptCacheDescriptor& expected,
                                            std::span<const int> prefix, const std::string& prepared_input) {
  if (Status ok = check_prepared_input_named(prepared_input); !ok) return ok.error();
  return load(root, expected, prefix, prepared_input);
}

Status Session::load(const std::filesystem::path& root, const PromptCacheDescriptor& expected,
                     std::span<const int> prefix, const std::string& prepared_input) {
  if (impl_->poison) return Error::poisoned(*impl_->poison);
  if (Status ok = check_tokens(impl_->model.config(), prefix, 0); !ok) return before_mutation(ok.error());
  auto reply =
      impl_->transact(cache_request(TransactionKind::prompt_cache_load, root, expected, prefix, prepared_input));
  if (!reply) return reply.error();
  impl_->prepared.clear();
  if (!prepared_input.empty()) impl_->prepared.set(prepared_input, static_cast<int>(prefix.size()));
  return {};
}

// ---------------------------------------------------------------------------
// Reports.

std::optional<PromptInputIdentity> Session::committed_prompt_input_identity() const {
  return impl_->prepared.describe(impl_->state().tokens());
}

SessionReport report_of(const Model& model, const std::string& model_identity, const TransactionRecord& record) {
  SessionReport r;
  r.model_identity = model_identity;
  r.weights_bytes_by_type = model.weight_bytes_by_type(WeightScope::everything());
  for (const auto& [type, bytes] : r.weights_bytes_by_type) r.weights_bytes += bytes;
  r.kernel_path = cpu::to_string(cpu::active_isa());
  r.context = model.config().seq_len;
  r.last_epoch = record.last_epoch;
  r.committed_epoch = record.committed_epoch;
  r.last_outcome = record.last_outcome;
  r.last_error = record.last_error;
  r.aborted_transactions = record.aborted_transactions;
  r.restoration_generation = record.restoration_generation;
  return r;
}

void add_weight_shares(SessionReport& report, std::vector<WeightShare> shares) {
  report.weights_residency = "resident";
  for (const WeightShare& share : shares) {
    report.weights_resident_bytes += share.resident_bytes;
    if (share.residency != "resident") report.weights_residency = share.residency;
  }
  report.weight_shares = std::move(shares);
}

void add_weight_shares(MaterializationReport& report, std::vector<WeightShare> shares) {
  for (const WeightShare& share : shares) report.weights_resident_bytes += share.resident_bytes;
  report.weight_shares = std::move(shares);
}

SessionReport Session::report() const {
  SessionReport r = report_of(impl_->model, impl_->model_identity, impl_->record);
  add_weight_shares(r, impl_->weight_shares());
  if (impl_->model.config().routed()) r.expert_rows.push_back(impl_->engine.worker(0).expert_rows());
  r.kv_bytes_used = impl_->state().used_bytes();
  r.kv_bytes_capacity = impl_->state().kv().capacity_bytes();
  r.position = impl_->state().position();
  r.state_epoch = impl_->state().state_epoch();
  r.state_digest = impl_->state().digest();
  return r;
}

MaterializationReport Session::materialization_report() const {
  const KvStore& kv = impl_->state().kv();
  MaterializationReport r;
  r.weights_mapped_bytes = impl_->model.file_bytes();
  add_weight_shares(r, impl_->weight_shares());
  r.kv_allocated_bytes = kv.held_bytes();
  r.kv_materialized_bytes = static_cast<std::uint64_t>(impl_->state().high_water()) * kv.position_bytes();
  r.high_water_position = impl_->state().high_water();
  return r;
}

}  // namespace accord
