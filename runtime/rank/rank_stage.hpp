// One rank's share of a forward step, without any transport: the caller
// (a session, or a rank's actors) moves activations between ranks.
//
// A RankStage owns the rank's stage backend (stage_backend.hpp: the CPU
// kernels, or a CUDA device), which keeps the KV cache of its units, and
// the SessionState over that cache. Rank 0 embeds token ids; every other
// rank starts from the activations the previous rank produced. The output
// owner (the last rank) ends with the head; the others end with the
// activations for the next rank. Because every kernel reduces in one fixed
// order, the logits of N stages equal those of one stage bit for bit (on
// the CPU; a CUDA stage is within a tolerance of it).
//
// Not thread-safe; the model and the pool must outlive it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/base/error.hpp"
#include "runtime/model/feed_forward.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/residency.hpp"
#include "runtime/model/stage_backend.hpp"
#include "runtime/model/transformer.hpp"
#include "runtime/rank/expert_placement.hpp"
#include "runtime/rank/observer.hpp"
#include "runtime/rank/partition.hpp"
#include "runtime/rank/state.hpp"
#include "runtime/rank/step_batcher.hpp"

namespace accord {

class RankStage {
 public:
  // With a budget (bytes; 0: none), the rank's weights are layered under
  // it (residency.hpp); a budget too small fails every step, so callers
  // check it first with plan_residency(model, scope, budget). Likewise a
  // backend that cannot be built (check_backend says why first): the stage
  // then holds a CPU one only so that its state exists, and fails every step.
  RankStage(const Model& model, cpu::ThreadPool& pool, const Partition& partition, int rank,
            const StageOptions& options = {});

  int rank() const { return rank_; }
  const ModelConfig& config() const { return model_.config(); }
  const UnitRange& units() const { return units_; }
  bool is_first() const { return first_; }
  // Whether it computes on a device (CUDA), not on the CPU's pool.
  bool on_device() const { return cpu_ == nullptr; }
  bool is_output_owner() const { return output_owner_; }
  // The weights this rank reads: its units, and where experts are spread,
  // the experts it holds of every block (expert_placement.hpp).
  const WeightScope& scope() const { return scope_; }
  // What it holds of them now.
  WeightShare weight_share() const;
  SessionState& state() { return *state_; }
  const SessionState& state() const { return *state_; }

  // Checks token ids, positions from the current one, and (past rank 0) the
  // shape of the incoming activations. Nothing changes when it fails.
  Status check_step(std::span<const int> tokens, std::span<const float> activations) const;
  // Checks token ids and that they fit the context from first_position.
  Status check_tokens(std::span<const int> tokens, int first_position) const {
    return accord::check_tokens(model_.config(), tokens, first_position);
  }

  // Runs the rank's units for `tokens` at the current position, writing
  // their keys and values. Rank 0 embeds `tokens`; the others start from
  // `activations` (rows, dim). The observer sees each unit's output. The
  // cache first takes room for the rows: a spent KV pool fails the step
  // before anything is written.
  Status execute(std::span<const int> tokens, std::span<const float> activations, StepObserver* observer);

  // The same in pieces, for blocks whose experts are spread over ranks
  // (expert_placement.hpp): start_units takes the rows and loads the
  // input; advance_units runs units until one needs other ranks' experts
  // and returns its rows for them (every helper of this stage has an
  // entry, empty or not), or nothing once every unit ran; then every
  // helper's outputs go to accept_experts before advance_units goes on.
  struct ExpertRound {
    int unit = 0;
    std::map<int, ExpertRequest> requests;  // by rank
  };
  Status start_units(std::span<const int> tokens, std::span<const float> activations);
  Result<std::optional<ExpertRound>> advance_units(StepObserver* observer);
  Status accept_experts(int rank, std::span<const float> outputs);
  // Rows another stage's unit `unit` routed to experts this rank holds:
  // each slot's output, (slots, dim). Refused when an expert is not here.
  Result<std::vector<float>> serve_experts(int unit, std::span<const int> experts, std::span<const float> rows);
  const ExpertPlacement& expert_placement() const { return experts_; }
  // Transformer::expert_rows of this rank (none on a device).
  std::vector<std::uint64_t> expert_rows() const;

  // Whether a step can run in a StepBatcher's batch: this rank runs the
  // whole model with every weight held, and no observer looks between units.
  bool batchable(const StepObserver* observer) const;
  // As execute and then logits(rows), in `batcher`'s next batch with other
  // sessions' steps: returns the logits, (1 or tokens, vocab).
  Result<std::vector<float>> execute_batched(StepBatcher& batcher, std::span<const int> tokens, bool all_rows);

  // After execute: the activations for the next rank, (rows, dim).
  std::span<const float> activations();
  // After execute, on the output owner: the prediction-target capture, the
  // residual stream after the last unit (before the final norm) of the
  // step's row `row`, (dim). The head leaves it as it is.
  std::span<const float> prediction_target_capture(int row);
  // After execute, on the output owner: the logits, (rows, vocab).
  std::span<float> logits(Transformer::Rows rows);
  // The same, seen and perhaps changed by the observer (when there is one);
  // the observer's error fails it.
  Result<std::span<float>> observed_logits(Transformer::Rows rows, StepObserver* observer);
  // Shows `values`, logits of the step's last rows computed earlier, to the
  // observer (when there is one), which may change them in place.
  Status observe_logits(std::span<float> values, StepObserver* observer);

 private:
  void build_backend(cpu::ThreadPool& pool, const StageOptions& options);
  // The placement of the experts, before the backend is built; then
  // check_expert_placement refuses what it cannot run with.
  void place_experts(const Partition& partition, const StageOptions& options);
  void check_expert_placement(const StageOptions& options);
  // Shows the unit's output to the observer, which may change it.
  Status observe_unit(int unit, int position, StepObserver* observer);

  const Model& model_;
  int rank_;
  UnitRange units_;
  bool first_;
  bool output_owner_;
  std::unique_ptr<StageBackend> backend_;
  CpuStage* cpu_ = nullptr;  // backend_, when it is the CPU's
  std::optional<SessionState> state_;
  std::unique_ptr<WeightResidency> residency_;  // with a budget
  std::optional<Error> stage_error_;            // a budget too small, a backend that could not be built
  ExpertPlacement experts_;
  WeightScope scope_;
  // The step in progress: its first position, its next unit, and whether
  // that unit waits for other ranks' experts.
  int step_position_ = 0;
  int next_unit_ = 0;
  bool awaiting_experts_ = false;
};

}  // namespace accord
