// How a model's units are split over ranks for pipeline execution: each
// rank holds one contiguous range; rank 0 also embeds the tokens and the
// last rank also owns the head (the output owner). Between consecutive
// ranks runs one route that carries the hidden activations.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/model/model.hpp"

namespace accord {

struct UnitRange {
  int first = 0;
  int count = 0;
  int end() const { return first + count; }
  bool operator==(const UnitRange&) const = default;
};

class Partition {
 public:
  // Ranges as equal as possible, the larger ones first: 5 units on 3 ranks
  // give 2, 2, 1. Needs 1 <= ranks <= units.
  static Result<Partition> balanced(int units, int ranks);
  // Ranges that balance the weight bytes each rank keeps resident: its
  // units' (unit_bytes), and on the last rank also the head's (rank 0 looks
  // up a few rows of the embedding, which costs nothing). Among equal
  // choices the earlier ranges are the larger. A pipeline of one sequence
  // runs one rank at a time, so the split decides memory, not speed.
  // Needs 1 <= ranks <= units.
  static Result<Partition> by_weight(const std::vector<std::uint64_t>& unit_bytes, std::uint64_t head_bytes, int ranks);
  static Result<Partition> by_weight(const Model& model, int ranks);
  // Ranges of the given sizes, in rank order; each >= 1, summing to units.
  static Result<Partition> from_counts(int units, const std::vector<int>& counts);

  int ranks() const { return static_cast<int>(ranges_.size()); }
  int units() const { return ranges_.back().end(); }
  const UnitRange& range(int rank) const { return ranges_.at(static_cast<std::size_t>(rank)); }
  bool is_first(int rank) const { return rank == 0; }
  bool is_output_owner(int rank) const { return rank == ranks() - 1; }
  // The weights rank `rank` reads: its units, and the embedding or the head
  // where it has them.
  WeightScope scope(int rank) const {
    return {is_first(rank), range(rank).first, range(rank).count, is_output_owner(rank)};
  }

 private:
  explicit Partition(std::vector<UnitRange> ranges) : ranges_(std::move(ranges)) {}
  std::vector<UnitRange> ranges_;
};

}  // namespace accord
