#include "runtime/agreement/dropped_messages.hpp"

#include <algorithm>
#include <numeric>

namespace accord {

std::string_view to_string(DropReason reason) {
  switch (reason) {
    case DropReason::other_session: return "other_session";
    case DropReason::unknown_rank: return "unknown_rank";
    case DropReason::rank_down: return "rank_down";
    case DropReason::stale_epoch: return "stale_epoch";
    case DropReason::future_epoch: return "future_epoch";
    case DropReason::duplicate: return "duplicate";
    case DropReason::late: return "late";
    case DropReason::out_of_order: return "out_of_order";
    case DropReason::malformed: return "malformed";
  }
  return "unknown";
}

DroppedMessages DroppedMessages::from_counts(const std::vector<std::uint64_t>& counts) {
  DroppedMessages dropped;
  for (std::size_t i = 0; i < std::min(counts.size(), kDropReasonCount); ++i) dropped.counts_[i] = counts[i];
  return dropped;
}

DroppedMessages& DroppedMessages::operator+=(const DroppedMessages& other) {
  for (std::size_t i = 0; i < kDropReasonCount; ++i) counts_[i] += other.counts_[i];
  return *this;
}

std::uint64_t DroppedMessages::total() const {
  return std::accumulate(counts_.begin(), counts_.end(), std::uint64_t{0});
}

}  // namespace accord
