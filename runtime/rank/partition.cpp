#include "runtime/rank/partition.hpp"

#include <optional>
#include <string>

namespace accord {

Result<Partition> Partition::balanced(int units, int ranks) {
  if (ranks < 1 || ranks > units) {
    return Error(ErrorCode::contract, "cannot split " + std::to_string(units) + " units over " + std::to_string(ranks) +
                                          " ranks: every rank needs at least one unit");
  }
  std::vector<int> counts;
  for (int r = 0; r < ranks; ++r) counts.push_back(units / ranks + (r < units % ranks ? 1 : 0));
  return from_counts(units, counts);
}

namespace {

// Splits the units greedily from the front, each rank but the last taking
// as many as fit `limit` while leaving one for each rank after it. Where
// any split fits, this one does (each of its ranges ends no earlier than
// that split's), so it decides whether `limit` can be met.
std::optional<std::vector<int>> split_within(const std::vector<std::uint64_t>& unit_bytes, std::uint64_t head_bytes,
                                             int ranks, std::uint64_t limit) {
  const int units = static_cast<int>(unit_bytes.size());
  std::vector<int> counts;
  int unit = 0;
  for (int r = 0; r + 1 < ranks; ++r) {
    std::uint64_t bytes = 0;
    int take = 0;
    const int last_allowed = units - (ranks - 1 - r);  // one unit left for each later rank
    while (unit + take < last_allowed && bytes + unit_bytes[static_cast<std::size_t>(unit + take)] <= limit) {
      bytes += unit_bytes[static_cast<std::size_t>(unit + take)];
      ++take;
    }
    if (take == 0) return std::nullopt;
    counts.push_back(take);
    unit += take;
  }
  std::uint64_t last = head_bytes;
  for (int u = unit; u < units; ++u) last += unit_bytes[static_cast<std::size_t>(u)];
  if (last > limit) return std::nullopt;
  counts.push_back(units - unit);
  return counts;
}

}  // namespace

Result<Partition> Partition::by_weight(const std::vector<std::uint64_t>& unit_bytes, std::uint64_t head_bytes,
                                       int ranks) {
  const int units = static_cast<int>(unit_bytes.size());
  if (ranks < 1 || ranks > units) return balanced(units, ranks);  // its error
  std::uint64_t low = 0, high = head_bytes;
  for (std::uint64_t bytes : unit_bytes) high += bytes;
  // The least limit a split fits: every split fits the total.
  while (low < high) {
    const std::uint64_t mid = low + (high - low) / 2;
    if (split_within(unit_bytes, head_bytes, ranks, mid)) {
      high = mid;
    } else {
      low = mid + 1;
    }
  }
  return from_counts(units, *split_within(unit_bytes, head_bytes, ranks, high));
}

Result<Partition> Partition::by_weight(const Model& model, int ranks) {
  auto bytes_of = [&](const WeightScope& scope) {
    std::uint64_t sum = 0;
    for (const auto& [type, bytes] : model.weight_bytes_by_type(scope)) sum += bytes;
    return sum;
  };
  std::vector<std::uint64_t> unit_bytes;
  for (int unit = 0; unit < model.config().n_layers; ++unit) unit_bytes.push_back(bytes_of({false, unit, 1, false}));
  return by_weight(unit_bytes, bytes_of({false, 0, 0, true}), ranks);
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
    return Error(ErrorCode::contract,
                 "the partition covers " + std::to_string(first) + " units, the model has " + std::to_string(units));
  }
  return Partition(std::move(ranges));
}

}  // namespace accord
