// One rank's local part of every phase, without any transport: the rank's
// RankParticipant (runtime/engine/rank_participant.hpp) calls it and moves what it
// produces.
//
// A RankWorker owns the rank's RankStage, the undo record of the open
// transaction and what its commit will do. It computes on a thread pool it
// may share: in-process ranks of a pipeline with one sequence compute one
// after another, so they share the process's whole pool and the rank whose
// turn it is uses every core (the pool serialises concurrent callers).
//
// Threading: not thread-safe; its RankParticipant is its only user, one call at a
// time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/base/error.hpp"
#include "runtime/rank/observer.hpp"
#include "runtime/rank/prediction_target.hpp"
#include "runtime/rank/prompt_cache_shard.hpp"
#include "runtime/rank/rank_stage.hpp"
#include "runtime/text/sampler.hpp"

namespace accord {

// Activations or logits as plain rows: (rows, width) floats.
struct RowBlock {
  int rows = 0;
  int width = 0;
  std::vector<float> data;
};

// The logits the output owner computes right after its units, in the same
// local action, so a step costs its rank one hand-over to compute, not two.
enum class OutputRows : std::uint8_t { none, last, all };

// What the output owner sampled, and where the sampler's random stream
// stands afterwards (Sampler::rng_state).
struct RankSample {
  SampledToken sampled;
  std::uint64_t rng_state = 0;
};

// What a rank records for a distributed checkpoint.
struct RankCheckpoint {
  int position = 0;
  std::uint64_t state_epoch = 0;
  std::uint64_t reset_epoch = 0;  // the reset the state descends from (its epoch; 0: none)
  std::string digest;
};

class RankWorker {
 public:
  // `model_identity` is the model's (runtime/model/identity.hpp), computed
  // once for all ranks. `stage` says where the rank computes and under
  // which weights budget (RankStage).
  RankWorker(const Model& model, std::shared_ptr<cpu::ThreadPool> pool, const Partition& partition, int rank,
             const std::string& model_identity, const StageOptions& stage = {});

  int rank() const { return stage_.rank(); }
  const ModelConfig& config() const { return stage_.config(); }
  bool is_first() const { return stage_.is_first(); }
  bool computes_on_device() const { return stage_.on_device(); }
  bool is_output_owner() const { return stage_.is_output_owner(); }
  int position() const { return stage_.state().position(); }
  std::string digest() const { return stage_.state().digest(); }
  const SessionState& state() const { return stage_.state(); }
  // What this rank's prompt-cache shard records and must match.
  const ShardIdentity& shard_identity() const { return shard_identity_; }
  // What the rank holds of the model's weights now.
  WeightShare weight_share() const { return stage_.weight_share(); }

  // --- forward steps -------------------------------------------------------
  // StateCheckpoint: checks the tokens against the context and saves the
  // rows the step will write. The commit appends them.
  Status begin_step(std::uint64_t epoch, std::span<const int> tokens);
  // Runs the rank's units: rank 0 from the tokens, the others from the
  // activations received on their route. The output owner then computes
  // `rows` of logits (none elsewhere).
  Status run_units(OutputRows rows = OutputRows::none);
  // With experts spread over ranks (expert_placement.hpp), the units run
  // in pieces before run_units, which then only computes the output:
  // advance_units runs them until one needs other ranks' experts and
  // returns its rows for them; each helper's outputs then go to
  // accept_experts, and advance_units goes on, until it returns nothing.
  Result<std::optional<RankStage::ExpertRound>> advance_units();
  Status accept_experts(int rank, std::span<const float> outputs);
  // Another stage's rows for experts this rank holds (RankStage::serve_experts).
  Result<std::vector<float>> serve_experts(int unit, std::span<const int> experts, std::span<const float> rows);
  const ExpertPlacement& expert_placement() const { return stage_.expert_placement(); }
  std::vector<std::uint64_t> expert_rows() const { return stage_.expert_rows(); }
  // The units rank `rank` of the session runs.
  const UnitRange& units_of(int rank) const { return partition_.range(rank); }
  // The activations for the next rank, after run_units.
  RowBlock outgoing_activations();
  // Accepts the previous rank's activations for the open step.
  Status receive_activations(RowBlock block);
  // On the output owner after run_units computed the logits: shows them
  // to the step's observer, which may change them; what it leaves is the
  // step's output. Only a step with an observer has work here.
  Status observe_output();
  bool step_has_observer() const { return step_observer_ != nullptr; }
  // The step's output (OutputPublication): the logits run_units computed,
  // as the observer left them.
  RowBlock published_output() const;
  // --- prediction-target steps (prediction_target.hpp) -----------------------
  // PredictionTargetCapture, on the output owner after run_units computed
  // the logits of at least the draft's rows and the one before: verifies
  // the step's last `draft_tokens` tokens and captures the last kept row.
  Status capture_prediction_target(int draft_tokens);
  // What the output owner captured, or the copy another rank received.
  std::optional<PredictionTargetState> prediction_target_state() const { return prediction_; }
  // PredictionTargetCapturePublication, on every other rank: holds the
  // output owner's capture and verdict for the open step.
  Status exchange_prediction_target_state(PredictionTargetState state);
  // PredictionTargetStatePreparation: validates the verdict's lane swap
  // against this rank's step.
  Status prepare_prediction_target_state(int draft_tokens);
  // PredictionExtensionExecution: rolls the rejected rows back; the
  // commit keeps the others, and the output keeps the last kept row.
  Status apply_prediction_target_operation();
  // A failed prediction-target step is undone like any other: restore().
  // On the output owner after run_units: samples the next token from
  // the output's last row with `options`, its random stream at rng_state.
  Result<RankSample> sample(const SamplerOptions& options, std::uint64_t rng_state, std::span<const int> stop_tokens);

  // Lends this rank the observer of the steps that begin from now on
  // (nullptr: none). The rank calls it for its own units in run_units and,
  // on the output owner, for the logits in observe_output; an error or an
  // exception from it fails that phase. A step keeps the observer it began
  // with.
  void lend_observer(std::shared_ptr<StepObserver> observer) { lent_observer_ = std::move(observer); }

  // From now on run_units computes in `batcher`'s batches with other
  // sessions' steps where the step allows it (RankStage::batchable);
  // nullptr: alone. The batcher must outlive the worker or be replaced.
  void lend_batcher(StepBatcher* batcher) { batcher_ = batcher; }

  // Seconds spent in run_units and logits so far.
  double compute_seconds() const { return static_cast<double>(compute_ns_) * 1e-9; }

  // --- checkpoints, rollback, reset --------------------------------------
  RankCheckpoint checkpoint() const;
  // Accepts `checkpoint` if this rank can restore it; the commit rewinds.
  Status prepare_rollback(std::uint64_t epoch, const RankCheckpoint& checkpoint);
  // The commit empties the state and invalidates earlier checkpoints.
  Status prepare_reset(std::uint64_t epoch);

  // --- snapshots (snapshot_shelf.hpp) ------------------------------------
  // SessionCheckpoint of a snapshot: shelves an image of the state under
  // `id`, which an abort takes off again.
  Status prepare_snapshot(std::uint64_t epoch, std::uint64_t id);
  // SessionRollbackPreparation of a restore: this rank's image of snapshot
  // `id`, checked to fit; the commit installs it, and checkpoints taken
  // before are refused afterwards.
  Status prepare_snapshot_restore(std::uint64_t epoch, std::uint64_t id);

  // --- prompt cache: the state's side (RankPromptCache does the files) ------
  // PromptCacheSavePreflight.
  Status check_prefix_held(std::span<const int> prefix) const;
  // PromptCacheSavePreparation: the shard of the first `rows` rows.
  std::vector<float> pack_shard(int rows) const;
  // PromptCacheLoadPreparation: accepts the shard of `prefix`, read and
  // checked by RankPromptCache; the commit installs it.
  Status prepare_load(std::uint64_t epoch, std::vector<int> prefix, std::vector<float> shard);

  // --- decisions -------------------------------------------------------------
  void commit(std::uint64_t epoch);
  // Puts back what transaction `epoch` changed on this rank, if anything.
  Status restore(std::uint64_t epoch);
  // Drops the open transaction's provisional work (the rank is poisoned).
  void forget_open_transaction();

 private:
  void open(std::uint64_t epoch, std::function<void(std::uint64_t)> on_commit);
  RowBlock head(bool all_rows);
  Status run_batched(bool all_rows);
  // run_units' checks, and then the stage's start_units.
  Status check_units() const;
  Status start_units();
  std::span<const float> incoming_activations() const;

  std::shared_ptr<cpu::ThreadPool> pool_;
  Partition partition_;
  RankStage stage_;
  ShardIdentity shard_identity_;
  std::shared_ptr<StepObserver> lent_observer_;
  StepBatcher* batcher_ = nullptr;
  // The epoch of the last reset that committed here. Every rank commits
  // the same reset epoch, so a rank started afresh to replace one that
  // exited agrees with the others after the reset that brings it in.
  std::uint64_t reset_epoch_ = 0;
  std::uint64_t compute_ns_ = 0;

  // The open transaction.
  std::uint64_t epoch_ = 0;
  std::optional<SessionState::Undo> undo_;
  std::optional<std::uint64_t> shelved_;  // the snapshot the open transaction shelved
  std::function<void(std::uint64_t)> on_commit_;
  std::vector<int> step_tokens_;
  std::optional<RowBlock> incoming_;
  bool units_started_ = false;
  bool units_ran_ = false;
  std::shared_ptr<StepObserver> step_observer_;
  std::optional<RowBlock> output_;
  std::optional<PredictionTargetState> prediction_;
  bool lane_swap_prepared_ = false;
};

}  // namespace accord
