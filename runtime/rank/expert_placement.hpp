// Where each routed block's experts compute when they are spread over ranks
// (`--expert-ranks N`, docs/models.md "Experts over ranks").
//
// A block's experts split into N slices of consecutive experts, as equal in
// count as can be (every expert of a block has the same shape, so equal
// counts are equal bytes). Slice 0 stays with the rank that runs the block
// (its stage); slice j lies on rank (stage + j) mod R, the stage's j-th
// helper (messages/phase.hpp, expert_helpers). With N = R every rank holds
// a 1/R share of every block's experts besides its own units' attention.
//
// Where an expert computes never changes a token's bits: its rows run
// through the same kernels, whose results do not depend on the batch, and
// the stage adds the experts' outputs in the order of their indices.
#pragma once

#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/model/model.hpp"
#include "runtime/rank/partition.hpp"

namespace accord {

class ExpertPlacement {
 public:
  // Every stage holds its own blocks' experts.
  ExpertPlacement() = default;
  // `config`'s experts spread over `expert_ranks` of the partition's ranks;
  // 1: not spread. A contract error names the option when the model has no
  // experts, or fewer than N, or the partition fewer ranks than N.
  static Result<ExpertPlacement> make(const Partition& partition, const ModelConfig& config, int expert_ranks);

  int expert_ranks() const { return expert_ranks_; }
  bool spread() const { return expert_ranks_ > 1; }
  // The rank that computes expert `expert` of unit `unit`.
  int holder(int unit, int expert) const;
  // The ranks other than `stage` that hold experts of its units, in slice order.
  std::vector<int> helpers(int stage) const;
  // The stages whose experts `rank` holds a slice of, in pipeline order.
  std::vector<int> helped_stages(int rank) const;
  // The experts of unit `unit` that `rank` holds (count 0: none).
  ExpertRange held(int unit, int rank) const;
  // The weights `rank` reads: the partition's scope, and where experts
  // are spread, the experts it holds of every block.
  WeightScope scope(const Partition& partition, int rank) const;

 private:
  ExpertRange slice(int j) const;

  std::vector<int> stage_of_unit_;  // for each unit, the rank that runs it
  int ranks_ = 1;
  int experts_ = 0;
  int expert_ranks_ = 1;
};

}  // namespace accord
