#include "runtime/rank/expert_placement.hpp"

#include <string>

#include "messages/phase.hpp"

namespace accord {

Result<ExpertPlacement> ExpertPlacement::make(const Partition& partition, const ModelConfig& config, int expert_ranks) {
  const std::string option = "--expert-ranks " + std::to_string(expert_ranks);
  if (expert_ranks < 1) return Error(ErrorCode::contract, option + ": expected at least 1");
  if (expert_ranks > 1 && !config.routed()) {
    return Error(ErrorCode::contract, option + ": the model has no experts to spread over ranks");
  }
  if (expert_ranks > 1 && expert_ranks > config.n_experts) {
    return Error(ErrorCode::contract,
                 option + " is more than the model's " + std::to_string(config.n_experts) + " experts per block");
  }
  if (expert_ranks > partition.ranks()) {
    return Error(ErrorCode::contract, option + " needs at least " + std::to_string(expert_ranks) +
                                          " ranks; the session has " + std::to_string(partition.ranks()));
  }
  ExpertPlacement placement;
  placement.ranks_ = partition.ranks();
  placement.experts_ = config.n_experts;
  placement.expert_ranks_ = expert_ranks;
  for (int r = 0; r < partition.ranks(); ++r) {
    for (int unit = 0; unit < partition.range(r).count; ++unit) placement.stage_of_unit_.push_back(r);
  }
  return placement;
}

// Slice j of a block's experts: the larger slices first, as Partition::balanced.
ExpertRange ExpertPlacement::slice(int j) const {
  const int base = experts_ / expert_ranks_, larger = experts_ % expert_ranks_;
  return {j * base + (j < larger ? j : larger), base + (j < larger ? 1 : 0)};
}

int ExpertPlacement::holder(int unit, int expert) const {
  const int stage = stage_of_unit_.at(static_cast<std::size_t>(unit));
  for (int j = 0; j < expert_ranks_; ++j) {
    if (slice(j).contains(expert)) return (stage + j) % ranks_;
  }
  return stage;
}

std::vector<int> ExpertPlacement::helpers(int stage) const {
  std::vector<int> ranks;
  for (RankId helper :
       expert_helpers(static_cast<RankId>(stage), static_cast<RankId>(ranks_), static_cast<RankId>(expert_ranks_))) {
    ranks.push_back(static_cast<int>(helper));
  }
  return ranks;
}

std::vector<int> ExpertPlacement::helped_stages(int rank) const {
  std::vector<int> stages;
  for (int stage = 0; stage < ranks_; ++stage) {
    for (int helper : helpers(stage)) {
      if (helper == rank) stages.push_back(stage);
    }
  }
  return stages;
}

WeightScope ExpertPlacement::scope(const Partition& partition, int rank) const {
  WeightScope scope = partition.scope(rank);
  if (!spread()) return scope;
  for (int unit = 0; unit < static_cast<int>(stage_of_unit_.size()); ++unit) scope.experts.push_back(held(unit, rank));
  return scope;
}

ExpertRange ExpertPlacement::held(int unit, int rank) const {
  if (!spread()) return {0, experts_};
  const int stage = stage_of_unit_.at(static_cast<std::size_t>(unit));
  const int j = ((rank - stage) % ranks_ + ranks_) % ranks_;
  return j < expert_ranks_ ? slice(j) : ExpertRange{};
}

}  // namespace accord
