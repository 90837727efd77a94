#include "runtime/session/partition.hpp"

#include <string>

namespace accord {

Result<Partition> Partition::balanced(int units, int ranks) {
  if (ranks < 1 || ranks > units) {
    return Error(ErrorCode::contract, "cannot split " + std::to_string(units) + " units over " +
                                          std::to_string(ranks) + " ranks: every rank needs at least one unit");
  }
  std::vector<int> counts;
  for (int r = 0; r < ranks; ++r) counts.push_back(units / ranks + (r < units % ranks ? 1 : 0));
  return from_counts(units, counts);
}

Result<Partition> Partition::from_counts(int units, const std::vector<int>& counts) {
  if (counts.empty()) return Error(ErrorCode::contract, "a partition needs at least one rank");
  std::vector<UnitRange> ranges;
  int first = 0;
  for (int count : counts) {
    if (count < 1) return Error(ErrorCode::contract, "every rank of a partition needs at least one unit");
    ranges.push_back({first, count});
    first += count;
  }
  if (first != units) {
    return Error(ErrorCode::contract, "the partition covers " + std::to_string(first) + " units, the model has " +
                                          std::to_string(units));
  }
  return Partition(std::move(ranges));
}

}  // namespace accord
