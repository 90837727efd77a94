// Why an agreement state machine ignored an input, and how often. A dropped
// input changes nothing but its counter; the counters let tests and reports
// see stale, duplicate and late traffic instead of it vanishing silently.
// Free of CAF and of the agreement itself, so a session's public header can
// report them (runtime/agreement/dropped_messages.hpp names the reasons).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <vector>

namespace accord {

enum class DropReason {
  other_session,  // for another session
  unknown_rank,   // from a rank outside the topology
  rank_down,      // from a rank already reported down
  stale_epoch,    // for an epoch before the current one
  future_epoch,   // for an epoch after the current one
  duplicate,      // a second answer to what was already answered or applied
  late,           // for the current epoch but nothing awaits it any more (decided, superseded)
  out_of_order,   // arrived in a state where the protocol never sends it
  malformed,      // holds a value that names nothing (an enum off the wire)
};

inline constexpr std::size_t kDropReasonCount = 9;
static_assert(static_cast<std::size_t>(DropReason::malformed) + 1 == kDropReasonCount);

class DroppedMessages {
 public:
  void count(DropReason reason) { ++counts_[static_cast<std::size_t>(reason)]; }
  std::uint64_t of(DropReason reason) const { return counts_[static_cast<std::size_t>(reason)]; }
  std::uint64_t total() const { return std::accumulate(counts_.begin(), counts_.end(), std::uint64_t{0}); }

  // The counters in DropReason order, as they travel between actors.
  std::vector<std::uint64_t> counts() const { return {counts_.begin(), counts_.end()}; }
  // Counters from counts(); values past the known reasons are ignored.
  static DroppedMessages from_counts(const std::vector<std::uint64_t>& counts) {
    DroppedMessages dropped;
    for (std::size_t i = 0; i < std::min(counts.size(), kDropReasonCount); ++i) dropped.counts_[i] = counts[i];
    return dropped;
  }
  DroppedMessages& operator+=(const DroppedMessages& other) {
    for (std::size_t i = 0; i < kDropReasonCount; ++i) counts_[i] += other.counts_[i];
    return *this;
  }

 private:
  std::array<std::uint64_t, kDropReasonCount> counts_{};
};

}  // namespace accord
