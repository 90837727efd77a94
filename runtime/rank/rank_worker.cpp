#include "runtime/rank/rank_worker.hpp"

#include <chrono>
#include <string>
#include <utility>

#include "runtime/base/assert.hpp"
#include "runtime/rank/snapshot_shelf.hpp"

namespace accord {

namespace {

// Adds the time until the end of the scope to a counter.
class ComputeTimer {
 public:
  explicit ComputeTimer(std::uint64_t& total) : total_(total), start_(Clock::now()) {}
  ~ComputeTimer() {
    total_ +=
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start_).count());
  }
  ComputeTimer(const ComputeTimer&) = delete;
  ComputeTimer& operator=(const ComputeTimer&) = delete;

 private:
  using Clock = std::chrono::steady_clock;
  std::uint64_t& total_;
  Clock::time_point start_;
};

}  // namespace

RankWorker::RankWorker(const Model& model, std::shared_ptr<cpu::ThreadPool> pool, const Partition& partition, int rank,
                       const std::string& model_identity, const StageOptions& stage)
    : pool_(std::move(pool)),
      partition_(partition),
      stage_(model, *pool_, partition, rank, stage),
      shard_identity_(
          accord::shard_identity(model_identity, model.config(), partition.ranks(), rank, partition.range(rank))) {}

void RankWorker::open(std::uint64_t epoch, std::function<void(std::uint64_t)> on_commit) {
  ACCORD_ASSERT(epoch > epoch_, "epochs never go backwards: a rank opens each transaction once, in epoch order");
  epoch_ = epoch;
  undo_.reset();
  // What an earlier transaction whose decision this rank missed left stays:
  // its rows' copies, and its snapshot (forget_open_transaction).
  stage_.state().settle_rows();
  shelved_.reset();
  incoming_.reset();
  units_started_ = false;
  units_ran_ = false;
  output_.reset();
  prediction_.reset();
  lane_swap_prepared_ = false;
  on_commit_ = std::move(on_commit);
}

Status RankWorker::begin_step(std::uint64_t epoch, std::span<const int> tokens) {
  if (Status ok = stage_.check_tokens(tokens, position()); !ok) return ok;
  const int first = position();
  open(epoch, [this, first](std::uint64_t e) { stage_.state().commit_rows(first, step_tokens_, e); });
  step_tokens_.assign(tokens.begin(), tokens.end());
  undo_ = stage_.state().capture_rows(first, static_cast<int>(tokens.size()));
  step_observer_ = lent_observer_;
  return {};
}

std::span<const float> RankWorker::incoming_activations() const {
  return incoming_ ? std::span<const float>(incoming_->data) : std::span<const float>();
}

Status RankWorker::check_units() const {
  if (step_tokens_.empty()) return Error(ErrorCode::state, "no step is open on this rank");
  if (!is_first() && !incoming_) {
    return Error(ErrorCode::state, "rank " + std::to_string(rank()) + " has not received its activations");
  }
  return stage_.check_step(step_tokens_, incoming_activations());
}

Status RankWorker::start_units() {
  if (Status ok = check_units(); !ok) return ok;
  units_started_ = true;
  return stage_.start_units(step_tokens_, incoming_activations());
}

Status RankWorker::run_units(OutputRows rows) {
  if (rows != OutputRows::none && !is_output_owner()) {
    return Error(ErrorCode::contract, "rank " + std::to_string(rank()) + " does not own the output");
  }
  ComputeTimer timer(compute_ns_);
  if (!units_ran_) {
    if (batcher_ != nullptr && rows != OutputRows::none && stage_.batchable(step_observer_.get())) {
      if (Status ok = check_units(); !ok) return ok;
      units_ran_ = true;
      return run_batched(rows == OutputRows::all);
    }
    if (Status ok = start_units(); !ok) return ok;
    auto round = stage_.advance_units(step_observer_.get());
    if (!round) return round.error();
    if (*round) return Error(ErrorCode::contract, "the step's units need experts that other ranks hold");
    units_ran_ = true;
  }
  if (rows != OutputRows::none) output_ = head(rows == OutputRows::all);
  return {};
}

Result<std::optional<RankStage::ExpertRound>> RankWorker::advance_units() {
  if (units_ran_) return std::optional<RankStage::ExpertRound>{};
  ComputeTimer timer(compute_ns_);
  if (!units_started_) {
    if (Status ok = start_units(); !ok) return ok.error();
  }
  auto round = stage_.advance_units(step_observer_.get());
  if (round && !*round) units_ran_ = true;
  return round;
}

Status RankWorker::accept_experts(int rank, std::span<const float> outputs) {
  return stage_.accept_experts(rank, outputs);
}

Result<std::vector<float>> RankWorker::serve_experts(int unit, std::span<const int> experts,
                                                     std::span<const float> rows) {
  if (step_tokens_.empty()) return Error(ErrorCode::state, "no step is open on this rank");
  ComputeTimer timer(compute_ns_);
  return stage_.serve_experts(unit, experts, rows);
}

Status RankWorker::run_batched(bool all_rows) {
  auto logits = stage_.execute_batched(*batcher_, step_tokens_, all_rows);
  if (!logits) return logits.error();
  const int rows = all_rows ? static_cast<int>(step_tokens_.size()) : 1;
  output_ = RowBlock{rows, static_cast<int>(logits->size()) / rows, std::move(*logits)};
  return {};
}

RowBlock RankWorker::outgoing_activations() {
  const auto rows = stage_.activations();
  const int width = static_cast<int>(rows.size() / step_tokens_.size());
  return {static_cast<int>(step_tokens_.size()), width, {rows.begin(), rows.end()}};
}

Status RankWorker::receive_activations(RowBlock block) {
  if (block.rows != static_cast<int>(step_tokens_.size()) ||
      block.data.size() != static_cast<std::size_t>(block.rows) * block.width) {
    return Error(ErrorCode::contract, "rank " + std::to_string(rank()) + " received " + std::to_string(block.rows) +
                                          " rows of activations for a step of " + std::to_string(step_tokens_.size()) +
                                          " tokens");
  }
  incoming_ = std::move(block);
  return {};
}

Status RankWorker::observe_output() {
  if (!output_) return Error(ErrorCode::state, "no output to observe on this rank");
  ComputeTimer timer(compute_ns_);
  return stage_.observe_logits(output_->data, step_observer_.get());
}

RowBlock RankWorker::head(bool all_rows) {
  const auto values = stage_.logits(all_rows ? Transformer::Rows::all : Transformer::Rows::last);
  const int rows = all_rows ? static_cast<int>(step_tokens_.size()) : 1;
  return {rows, static_cast<int>(values.size()) / rows, {values.begin(), values.end()}};
}

RowBlock RankWorker::published_output() const { return output_.value_or(RowBlock{}); }

Status RankWorker::capture_prediction_target(int draft_tokens) {
  if (!output_) return Error(ErrorCode::state, "no output to verify a draft against on this rank");
  if (draft_tokens < 0 || draft_tokens >= output_->rows) {
    return Error(ErrorCode::contract, "a draft of " + std::to_string(draft_tokens) + " token(s) needs " +
                                          std::to_string(draft_tokens + 1) + " rows of logits; the step has " +
                                          std::to_string(output_->rows));
  }
  prediction_ = verify_draft(stage_, output_->data, step_tokens_, draft_tokens);
  return {};
}

Status RankWorker::exchange_prediction_target_state(PredictionTargetState state) {
  if (step_tokens_.empty()) return Error(ErrorCode::state, "no step is open on this rank");
  prediction_ = std::move(state);
  return {};
}

Status RankWorker::prepare_prediction_target_state(int draft_tokens) {
  if (!prediction_) {
    return Error(ErrorCode::state, "rank " + std::to_string(rank()) + " holds no prediction-target verdict");
  }
  if (Status ok = check_lane_swap(*prediction_, static_cast<int>(step_tokens_.size()), draft_tokens); !ok) return ok;
  lane_swap_prepared_ = true;
  return {};
}

Status RankWorker::apply_prediction_target_operation() {
  if (!lane_swap_prepared_ || !undo_) {
    return Error(ErrorCode::state, "rank " + std::to_string(rank()) + " has no prepared lane swap");
  }
  ACCORD_ASSERT(
      prediction_ && prediction_->kept_rows >= 1 && prediction_->kept_rows <= static_cast<int>(step_tokens_.size()),
      "a prepared lane swap keeps between one row and the step's rows (check_lane_swap checked it)");
  drop_rejected_rows(stage_.state(), *undo_, *prediction_);
  const int step_rows = static_cast<int>(step_tokens_.size());
  step_tokens_.resize(static_cast<std::size_t>(prediction_->kept_rows));
  if (output_) {
    const auto row = output_->data.begin() + static_cast<std::ptrdiff_t>(kept_row_offset(
                                                 *prediction_, step_rows, output_->rows, output_->width));
    output_ = RowBlock{1, output_->width, {row, row + output_->width}};
  }
  return {};
}

Result<RankSample> RankWorker::sample(const SamplerOptions& options, std::uint64_t rng_state,
                                      std::span<const int> stop_tokens) {
  if (!output_ || output_->rows == 0) return Error(ErrorCode::state, "no output to sample from on this rank");
  if (Status ok = validate(options); !ok) return ok.error();
  ComputeTimer timer(compute_ns_);
  Sampler sampler(options, rng_state);
  const auto last_row = std::span<const float>(output_->data).last(static_cast<std::size_t>(output_->width));
  const SampledToken sampled = sample_token(sampler, last_row, stop_tokens);
  return RankSample{sampled, sampler.rng_state()};
}

RankCheckpoint RankWorker::checkpoint() const {
  return {position(), stage_.state().state_epoch(), reset_epoch_, digest()};
}

Status RankWorker::prepare_rollback(std::uint64_t epoch, const RankCheckpoint& cp) {
  if (cp.position < 0 || cp.state_epoch >= epoch) {
    return Error(ErrorCode::state, "the checkpoint (position " + std::to_string(cp.position) + ", state epoch " +
                                       std::to_string(cp.state_epoch) + ") was never a state of this session");
  }
  if (cp.reset_epoch != reset_epoch_) {
    return Error(ErrorCode::state, "the checkpoint was taken before the session was reset");
  }
  if (!stage_.state().rows_unchanged_since(cp.position, cp.state_epoch)) {
    return Error(ErrorCode::state, "rank " + std::to_string(rank()) + ": rows below the checkpoint's position " +
                                       std::to_string(cp.position) + " were overwritten after it was taken");
  }
  open(epoch, [this, cp](std::uint64_t e) {
    ACCORD_ASSERT(cp.state_epoch < e, "a rollback goes back to a state committed before it");
    stage_.state().rewind(cp.position, cp.state_epoch);
  });
  undo_ = stage_.state().capture_rows(0, 0);
  return {};
}

Status RankWorker::prepare_reset(std::uint64_t epoch) {
  open(epoch, [this](std::uint64_t e) {
    stage_.state().clear(e);
    reset_epoch_ = e;
  });
  undo_ = stage_.state().capture_rows(0, 0);
  return {};
}

Status RankWorker::prepare_snapshot(std::uint64_t epoch, std::uint64_t id) {
  open(epoch, nullptr);
  // Shelved now, before this rank reports, so that every rank's is there
  // when the caller learns of the commit; an abort takes it off again.
  SnapshotShelf::process().put(
      id, static_cast<RankId>(rank()),
      std::make_shared<const RankSnapshot>(RankSnapshot{stage_.state().freeze(), shard_identity_}));
  shelved_ = id;
  return {};
}

Status RankWorker::prepare_snapshot_restore(std::uint64_t epoch, std::uint64_t id) {
  auto snapshot = SnapshotShelf::process().find(id, static_cast<RankId>(rank()));
  if (snapshot == nullptr) {
    return Error(ErrorCode::state, "rank " + std::to_string(rank()) + " holds no snapshot " + std::to_string(id) +
                                       " (it was released, or taken in another process)");
  }
  const ShardIdentity& theirs = snapshot->identity;
  if (theirs.model_identity != shard_identity_.model_identity || !(theirs.topology == shard_identity_.topology)) {
    return Error(ErrorCode::state,
                 "the snapshot was taken of another model or partition than rank " + std::to_string(rank()) + "'s");
  }
  if (Status ok = stage_.state().check_image(snapshot->image); !ok) return ok;
  open(epoch, [this, snapshot = std::move(snapshot)](std::uint64_t e) { stage_.state().install(snapshot->image, e); });
  undo_ = stage_.state().capture_rows(0, 0);
  return {};
}

Status RankWorker::check_prefix_held(std::span<const int> prefix) const {
  return accord::check_prefix_held(stage_.state(), prefix);
}

std::vector<float> RankWorker::pack_shard(int rows) const { return accord::pack_shard(stage_.state(), rows); }

Status RankWorker::prepare_load(std::uint64_t epoch, std::vector<int> prefix, std::vector<float> shard) {
  if (Status ok = stage_.check_tokens(prefix, 0); !ok) return ok;
  if (shard.size() != shard_identity_.shard_floats(static_cast<int>(prefix.size()))) {
    return Error(ErrorCode::prompt_cache, "rank " + std::to_string(rank()) + " was handed a shard of " +
                                              std::to_string(shard.size()) + " floats for a prefix of " +
                                              std::to_string(prefix.size()) + " tokens");
  }
  const int rows = static_cast<int>(prefix.size());
  // Nothing changes before the commit but the cache's room, so the undo is
  // the position and that room.
  open(epoch, [this, prefix = std::move(prefix), shard = std::move(shard)](std::uint64_t e) {
    install_shard(stage_.state(), shard, prefix, e);
  });
  undo_ = stage_.state().capture_rows(0, 0);
  return stage_.state().prepare_rows(0, rows);
}

void RankWorker::commit(std::uint64_t epoch) {
  ACCORD_ASSERT(epoch >= epoch_, "a commit is for the open transaction or a later one, never an earlier one");
  if (on_commit_ && epoch == epoch_) on_commit_(epoch);
  forget_open_transaction();
}

Status RankWorker::restore(std::uint64_t epoch) {
  // A rank whose part failed before it opened the transaction has nothing
  // of it to undo.
  ACCORD_ASSERT(epoch >= epoch_, "a restore is for the open transaction or a later one, never an earlier one");
  if (epoch == epoch_ && undo_) {
    // Only a commit moves the position, and a commit drops the undo: the
    // restore finds the position it captured and returns there.
    ACCORD_ASSERT(position() == undo_->position && stage_.state().state_epoch() == undo_->state_epoch,
                  "a restore returns to the checkpointed position and epoch, which nothing moved since");
    stage_.state().restore(*undo_);
  }
  if (epoch == epoch_ && shelved_) SnapshotShelf::process().drop(*shelved_);  // an aborted snapshot
  forget_open_transaction();
  return {};
}

void RankWorker::forget_open_transaction() {
  // A snapshot shelved by a transaction this rank never saw decided stays:
  // it may have committed, and the caller's handle drops it if not.
  shelved_.reset();
  undo_.reset();
  on_commit_ = nullptr;
  step_tokens_.clear();
  incoming_.reset();
  step_observer_.reset();
  output_.reset();
  prediction_.reset();
  lane_swap_prepared_ = false;
}

}  // namespace accord
