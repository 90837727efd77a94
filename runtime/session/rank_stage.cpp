#include "runtime/session/rank_stage.hpp"

#include <string>

namespace accord {

RankStage::RankStage(const Model& model, cpu::ThreadPool& pool, const Partition& partition, int rank,
                     std::uint64_t max_resident_bytes)
    : model_(model),
      rank_(rank),
      units_(partition.range(rank)),
      first_(partition.is_first(rank)),
      output_owner_(partition.is_output_owner(rank)),
      transformer_(model, pool),
      state_(model.config(), units_.first, units_.count) {
  if (max_resident_bytes == 0) return;
  auto plan = plan_residency(model, scope(), max_resident_bytes);
  if (!plan) {
    residency_error_ = plan.error();
    return;
  }
  residency_ = std::make_unique<WeightResidency>(model, std::move(*plan), units_.first);
  transformer_.set_residency(residency_.get());
}

WeightShare RankStage::weight_share() const {
  WeightShare share;
  share.bytes_by_type = model_.weight_bytes_by_type(scope());
  for (const auto& [type, bytes] : share.bytes_by_type) share.bytes += bytes;
  share.resident_bytes = model_.resident_bytes(scope());
  if (residency_) {
    share.residency = "layered";
    share.budget_bytes = residency_->budget_bytes();
    share.streamed_bytes_per_step = residency_->streamed_bytes_per_step();
    share.streamed_bytes = residency_->streamed_bytes();
  }
  return share;
}

Status RankStage::check_step(std::span<const int> tokens, std::span<const float> activations) const {
  if (residency_error_) return *residency_error_;
  if (Status ok = check_tokens(tokens, state_.position()); !ok) return ok;
  if (!first_ && activations.size() != tokens.size() * static_cast<std::size_t>(model_.config().dim)) {
    return Error(ErrorCode::contract, "rank " + std::to_string(rank_) + " expected activations of " +
                                          std::to_string(tokens.size()) + " rows of " +
                                          std::to_string(model_.config().dim) + ", got " +
                                          std::to_string(activations.size()) + " values");
  }
  return {};
}

Status RankStage::execute(std::span<const int> tokens, std::span<const float> activations, StepObserver* observer) {
  const int position = state_.position();
  if (first_) {
    transformer_.embed(tokens);
  } else {
    transformer_.load_hidden(activations);
  }
  for (int unit = units_.first; unit < units_.end(); ++unit) {
    transformer_.run_unit(unit, position, state_.kv());
    if (observer != nullptr) {
      Status s = observer->on_unit_output(unit, position, transformer_.hidden(), transformer_.batch());
      if (!s) return Error(ErrorCode::mechanism, "unit observer failed after unit " + std::to_string(unit) + ": " +
                                                     s.error().message());
    }
  }
  return {};
}

bool RankStage::batchable(const StepObserver* observer) const {
  return first_ && output_owner_ && units_.count == model_.config().n_layers && !residency_ && observer == nullptr;
}

Result<std::vector<float>> RankStage::execute_batched(StepBatcher& batcher, std::span<const int> tokens,
                                                      bool all_rows) {
  auto output = batcher.run({tokens, state_.position(), &state_.kv(), all_rows});
  if (!output) return output.error();
  transformer_.load_hidden(output->hidden);  // what activations() and the capture read
  return std::move(output->logits);
}

std::span<const float> RankStage::activations() { return transformer_.hidden(); }

std::span<const float> RankStage::prediction_target_capture(int row) {
  const auto dim = static_cast<std::size_t>(model_.config().dim);
  return activations().subspan(static_cast<std::size_t>(row) * dim, dim);
}

std::span<float> RankStage::logits(Transformer::Rows rows) { return transformer_.head(rows); }

Result<std::span<float>> RankStage::observed_logits(Transformer::Rows rows, StepObserver* observer) {
  std::span<float> values = logits(rows);
  if (Status ok = observe_logits(values, observer); !ok) return ok.error();
  return values;
}

Status RankStage::observe_logits(std::span<float> values, StepObserver* observer) {
  if (observer == nullptr) return {};
  const int n = static_cast<int>(values.size()) / model_.config().vocab_size;
  // The state's position is still the step's first until the commit.
  const int first_row_position = state_.position() + transformer_.batch() - n;
  if (Status s = observer->on_logits(first_row_position, values, n); !s) {
    return Error(ErrorCode::mechanism, "logits observer failed: " + s.error().message());
  }
  return {};
}

}  // namespace accord
