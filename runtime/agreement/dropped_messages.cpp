#include "runtime/agreement/dropped_messages.hpp"

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

}  // namespace accord
