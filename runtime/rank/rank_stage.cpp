#include "runtime/rank/rank_stage.hpp"

#include <string>

namespace accord {

RankStage::RankStage(const Model& model, cpu::ThreadPool& pool, const Partition& partition, int rank,
                     const StageOptions& options)
    : model_(model),
      rank_(rank),
      units_(partition.range(rank)),
      first_(partition.is_first(rank)),
      output_owner_(partition.is_output_owner(rank)) {
  place_experts(partition, options);
  build_backend(pool, options);
  state_.emplace(backend_->kv());
  check_expert_placement(options);
  if (stage_error_ || options.max_resident_bytes == 0) return;
  if (cpu_ == nullptr) {
    stage_error_ = Error(ErrorCode::contract,
                         "a weights budget (--max-resident-bytes) layers the CPU's weights; "
                         "the " +
                             to_string(options.backend) + " backend holds them all");
    return;
  }
  auto plan = plan_residency(model, scope(), options.max_resident_bytes);
  if (!plan) {
    stage_error_ = plan.error();
    return;
  }
  residency_ = std::make_unique<WeightResidency>(model, std::move(*plan), units_.first);
  cpu_->transformer().set_residency(residency_.get());
}

void RankStage::build_backend(cpu::ThreadPool& pool, const StageOptions& options) {
  auto backend = make_stage(model_, pool, scope(), options, rank_);
  if (!backend) {
    stage_error_ = Error(backend.error().code(), "rank " + std::to_string(rank_) + ": " + backend.error().message());
    backend = make_stage(model_, pool, scope(), StageOptions{}, rank_);
  }
  backend_ = std::move(*backend);
  cpu_ = dynamic_cast<CpuStage*>(backend_.get());
}

void RankStage::place_experts(const Partition& partition, const StageOptions& options) {
  auto placement = ExpertPlacement::make(partition, model_.config(), options.expert_ranks);
  if (placement) experts_ = std::move(*placement);
  scope_ = experts_.scope(partition, rank_);
  if (!placement) stage_error_ = placement.error();
}

void RankStage::check_expert_placement(const StageOptions& options) {
  if (!experts_.spread() || stage_error_) return;
  if (cpu_ == nullptr) {
    stage_error_ = Error(ErrorCode::contract, "experts spread over ranks (--expert-ranks) compute on the CPU; the " +
                                                  to_string(options.backend) + " backend runs whole blocks");
  } else if (options.max_resident_bytes > 0) {
    stage_error_ = Error(ErrorCode::contract,
                         "a weights budget (--max-resident-bytes) layers whole blocks; it does not combine with "
                         "experts spread over ranks (--expert-ranks)");
  }
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
  if (stage_error_) return *stage_error_;
  if (Status ok = check_tokens(tokens, state_->position()); !ok) return ok;
  if (!first_ && activations.size() != tokens.size() * static_cast<std::size_t>(model_.config().dim)) {
    return Error(ErrorCode::contract, "rank " + std::to_string(rank_) + " expected activations of " +
                                          std::to_string(tokens.size()) + " rows of " +
                                          std::to_string(model_.config().dim) + ", got " +
                                          std::to_string(activations.size()) + " values");
  }
  return {};
}

Status RankStage::execute(std::span<const int> tokens, std::span<const float> activations, StepObserver* observer) {
  if (Status ok = start_units(tokens, activations); !ok) return ok;
  auto round = advance_units(observer);
  if (!round) return round.error();
  if (*round) {
    return Error(ErrorCode::contract, "unit " + std::to_string((*round)->unit) +
                                          " needs experts that other ranks hold: its step runs over expert routes");
  }
  return {};
}

Status RankStage::start_units(std::span<const int> tokens, std::span<const float> activations) {
  const int position = state_->position();
  if (Status room = state_->prepare_rows(position, position + static_cast<int>(tokens.size())); !room) return room;
  if (first_) {
    backend_->embed(tokens);
  } else {
    backend_->load_hidden(activations);
  }
  step_position_ = position;
  next_unit_ = units_.first;
  awaiting_experts_ = false;
  return {};
}

Result<std::optional<RankStage::ExpertRound>> RankStage::advance_units(StepObserver* observer) {
  if (awaiting_experts_) {
    cpu_->transformer().finish_unit(next_unit_);
    awaiting_experts_ = false;
    if (Status ok = observe_unit(next_unit_++, step_position_, observer); !ok) return ok.error();
  }
  for (; next_unit_ < units_.end(); ++next_unit_) {
    if (experts_.spread()) {
      const int unit = next_unit_;
      auto holder = [&](int expert) { return experts_.holder(unit, expert); };
      ExpertRound round{unit, cpu_->transformer().begin_unit(unit, step_position_, cpu_->cache(), holder, rank_)};
      for (int helper : experts_.helpers(rank_)) round.requests[helper];  // each helper hears of each unit
      awaiting_experts_ = true;
      return std::optional<ExpertRound>(std::move(round));
    }
    backend_->run_unit(next_unit_, step_position_);
    if (Status ok = observe_unit(next_unit_, step_position_, observer); !ok) return ok.error();
  }
  return std::optional<ExpertRound>{};
}

Status RankStage::observe_unit(int unit, int position, StepObserver* observer) {
  if (observer == nullptr) return {};
  Status s = observer->on_unit_output(unit, position, backend_->hidden(), backend_->batch());
  if (!s) {
    return Error(ErrorCode::mechanism,
                 "unit observer failed after unit " + std::to_string(unit) + ": " + s.error().message());
  }
  backend_->hidden_changed();
  return {};
}

std::vector<std::uint64_t> RankStage::expert_rows() const {
  return cpu_ != nullptr ? cpu_->transformer().expert_rows() : std::vector<std::uint64_t>{};
}

Status RankStage::accept_experts(int rank, std::span<const float> outputs) {
  if (!awaiting_experts_) return Error(ErrorCode::state, "no unit of this rank waits for experts");
  const int unit = next_unit_;
  return cpu_->transformer().accept_experts([&](int expert) { return experts_.holder(unit, expert); }, rank, outputs);
}

Result<std::vector<float>> RankStage::serve_experts(int unit, std::span<const int> experts,
                                                    std::span<const float> rows) {
  if (stage_error_) return *stage_error_;
  const ModelConfig& c = model_.config();
  if (!experts_.spread() || unit < 0 || unit >= c.n_layers) {
    return Error(ErrorCode::contract,
                 "rank " + std::to_string(rank_) + " holds no experts of unit " + std::to_string(unit));
  }
  if (rows.size() != experts.size() * static_cast<std::size_t>(c.dim)) {
    return Error(ErrorCode::contract, "rank " + std::to_string(rank_) + " received " + std::to_string(rows.size()) +
                                          " values for " + std::to_string(experts.size()) + " rows of " +
                                          std::to_string(c.dim));
  }
  const ExpertRange held = experts_.held(unit, rank_);
  for (int expert : experts) {
    if (!held.contains(expert)) {
      return Error(ErrorCode::contract, "rank " + std::to_string(rank_) + " does not hold expert " +
                                            std::to_string(expert) + " of unit " + std::to_string(unit));
    }
  }
  std::vector<float> out;
  cpu_->transformer().serve_experts(unit, experts, rows, out);
  return out;
}

bool RankStage::batchable(const StepObserver* observer) const {
  const bool whole_model = first_ && output_owner_ && units_.count == model_.config().n_layers;
  return cpu_ != nullptr && !stage_error_ && whole_model && !residency_ && observer == nullptr;
}

Result<std::vector<float>> RankStage::execute_batched(StepBatcher& batcher, std::span<const int> tokens,
                                                      bool all_rows) {
  const int position = state_->position();
  if (Status room = state_->prepare_rows(position, position + static_cast<int>(tokens.size())); !room) {
    return room.error();
  }
  auto output = batcher.run({tokens, state_->position(), &cpu_->cache(), all_rows});
  if (!output) return output.error();
  cpu_->load_hidden(output->hidden);  // what activations() and the capture read
  return std::move(output->logits);
}

std::span<const float> RankStage::activations() { return backend_->hidden(); }

std::span<const float> RankStage::prediction_target_capture(int row) {
  const auto dim = static_cast<std::size_t>(model_.config().dim);
  return activations().subspan(static_cast<std::size_t>(row) * dim, dim);
}

std::span<float> RankStage::logits(Transformer::Rows rows) { return backend_->head(rows); }

Result<std::span<float>> RankStage::observed_logits(Transformer::Rows rows, StepObserver* observer) {
  std::span<float> values = logits(rows);
  if (Status ok = observe_logits(values, observer); !ok) return ok.error();
  return values;
}

Status RankStage::observe_logits(std::span<float> values, StepObserver* observer) {
  if (observer == nullptr) return {};
  const int n = static_cast<int>(values.size()) / model_.config().vocab_size;
  // The state's position is still the step's first until the commit.
  const int first_row_position = state_->position() + backend_->batch() - n;
  if (Status s = observer->on_logits(first_row_position, values, n); !s) {
    return Error(ErrorCode::mechanism, "logits observer failed: " + s.error().message());
  }
  return {};
}

}  // namespace accord
