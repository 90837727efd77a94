#include "runtime/session/session.hpp"

#include <random>

#include "kernels/cpu/isa.hpp"
#include "runtime/engine/session_requests.hpp"
#include "runtime/engine/transaction_driver.hpp"
#include "runtime/model/identity.hpp"
#include "runtime/rank/partition.hpp"

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

Session::Session(const Model& model, cpu::ThreadPool& pool, const StageOptions& stage)
    : model_(model),
      model_identity_(accord::model_identity(model)),
      session_id_(random_u64()),
      engine_(model, borrowed(pool), Partition::balanced(model.config().n_layers, 1).value(), model_identity_,
              session_id_, DirectEngineOptions{{}, {}, nullptr, stage}) {}

void Session::set_failure_hook(FailureHook hook) {
  if (!hook) return engine_.set_phase_hook({});
  engine_.set_phase_hook([hook = std::move(hook)](RankId, const PhaseId& phase, Epoch epoch) {
    return hook(phase.phase, epoch);
  });
}

Result<TransactionReply> Session::transact(const TransactionRequest& request) {
  auto settled = settle(record_, request.kind, engine_.run(request));
  if (!settled && settled.error().poison()) poison_ = settled.error().poison();
  return settled;
}

// ---------------------------------------------------------------------------
// Forward steps: the phases of transaction_plan.hpp's forward step on one
// rank: StateCheckpoint, Execution, OutputObservation,
// [PredictionTargetCapture, PredictionTargetCapturePublication,
// PredictionTargetStatePreparation, PredictionExtensionExecution,]
// OutputPublication, MechanismCompletion, Commit.

Result<StepResult> Session::step(const StepOptions& options) {
  if (poison_) return Error::poisoned(*poison_);
  const int first = position();
  if (Status ok = check_step(model_.config(), options, first); !ok) return before_mutation(ok.error());
  // A draft is verified against every row's logits.
  const bool all_rows = options.all_rows || (options.prediction_target && options.draft_tokens > 0);
  const int draft_tokens = options.prediction_target ? options.draft_tokens : -1;
  // The observer is the caller's for this call only.
  if (options.observer) engine_.lend_observer(options.observer);
  auto reply = transact(step_request(options.tokens, all_rows, draft_tokens));
  if (options.observer) engine_.lend_observer(nullptr);
  if (!reply) return reply.error();
  published_ = std::move(reply->logits.data);
  capture_ = std::move(reply->prediction_target.hidden.data);
  const int kept = options.prediction_target ? reply->prediction_target.kept_rows
                                             : static_cast<int>(options.tokens.size());
  const int rows = static_cast<int>(published_.size()) / model_.config().vocab_size;
  StepResult result{reply->epoch, first + kept - rows, rows, published_, capture_,
                    reply->prediction_target.accepted, reply->prediction_target.next_token, {}};
  if (options.sampler != nullptr) {
    const auto vocab = static_cast<std::size_t>(model_.config().vocab_size);
    result.sampled = sample_token(*options.sampler, result.logits.last(vocab), options.stop_tokens);
  }
  return result;
}

// ---------------------------------------------------------------------------
// Checkpoints, rollback, reset.

Result<SessionCheckpoint> Session::checkpoint() {
  if (poison_) return Error::poisoned(*poison_);
  TransactionRequest request;
  request.kind = TransactionKind::checkpoint;
  auto reply = transact(request);
  if (!reply) return reply.error();
  if (reply->checkpoints.size() != 1) return Error(ErrorCode::mechanism, "the rank reported no checkpoint");
  const RankCheckpointReport& cp = reply->checkpoints.front();
  return SessionCheckpoint{session_id_, cp.reset_epoch, cp.position, cp.state_epoch, cp.digest};
}

Result<CompleteCheckpoint> Session::checkpoint_complete() {
  auto state = checkpoint();
  if (!state) return state.error();
  return CompleteCheckpoint{*state, committed_prompt_input_identity()};
}

Status Session::rollback(const SessionCheckpoint& checkpoint) {
  if (poison_) return Error::poisoned(*poison_);
  if (checkpoint.session_id != session_id_) {
    return before_mutation(Error(ErrorCode::state, "the checkpoint belongs to another session"));
  }
  auto reply = transact(rollback_request(checkpoint.position, checkpoint.state_epoch, checkpoint.reset_epoch));
  if (!reply) return reply.error();
  prepared_.keep_within(position());
  return {};
}

Status Session::rollback_complete(const CompleteCheckpoint& checkpoint) {
  if (Status ok = check_prompt_matches_position(checkpoint.prompt, checkpoint.state.position); !ok) return ok;
  if (Status s = rollback(checkpoint.state); !s) return s;
  prepared_.restore(checkpoint.prompt);
  return {};
}

Status Session::reset() {
  TransactionRequest request;
  request.kind = TransactionKind::reset;
  auto reply = transact(request);
  if (!reply) return reply.error();
  prepared_.clear();
  poison_.reset();
  return {};
}

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

Result<PromptCacheSaveResult> Session::save(const std::filesystem::path& root,
                                            const PromptCacheDescriptor& descriptor, std::span<const int> prefix,
                                            const std::string& prepared_input) {
  if (poison_) return Error::poisoned(*poison_);
  const TransactionRequest request =
      cache_request(TransactionKind::prompt_cache_save, root, descriptor, prefix, prepared_input);
  auto reply = transact(request);
  if (!reply) return reply.error();
  return save_result(model_.config(), request, *reply);
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
  if (poison_) return Error::poisoned(*poison_);
  if (Status ok = check_tokens(model_.config(), prefix, 0); !ok) return before_mutation(ok.error());
  auto reply = transact(cache_request(TransactionKind::prompt_cache_load, root, expected, prefix, prepared_input));
  if (!reply) return reply.error();
  prepared_.clear();
  if (!prepared_input.empty()) prepared_.set(prepared_input, static_cast<int>(prefix.size()));
  return {};
}

// ---------------------------------------------------------------------------
// Reports.

std::optional<PromptInputIdentity> Session::committed_prompt_input_identity() const {
  return prepared_.describe(state().tokens());
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

std::vector<WeightShare> Session::weight_shares() const {
  std::vector<WeightShare> shares;
  for (int r = 0; r < engine_.ranks(); ++r) shares.push_back(engine_.worker(r).weight_share());
  return shares;
}

SessionReport Session::report() const {
  SessionReport r = report_of(model_, model_identity_, record_);
  add_weight_shares(r, weight_shares());
  r.kv_bytes_used = state().used_bytes();
  r.kv_bytes_capacity = state().kv().capacity_bytes();
  r.position = state().position();
  r.state_epoch = state().state_epoch();
  r.state_digest = state().digest();
  return r;
}

MaterializationReport Session::materialization_report() const {
  const KvStore& kv = state().kv();
  MaterializationReport r;
  r.weights_mapped_bytes = model_.file_bytes();
  add_weight_shares(r, weight_shares());
  r.kv_allocated_bytes = kv.capacity_bytes();
  r.kv_materialized_bytes = static_cast<std::uint64_t>(state().high_water()) * kv.position_bytes();
  r.high_water_position = state().high_water();
  return r;
}

}  // namespace accord
