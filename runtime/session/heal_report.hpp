// What healing a poisoned session did (DistributedSession::heal,
// GenerationTarget::heal).
#pragma once

namespace accord {

struct HealReport {
  bool healed = false;      // false: the target was usable, and nothing was done
  int replaced_ranks = 0;   // ranks started afresh: restarted, reconnected, or on a spare node
  int replayed_tokens = 0;  // committed tokens prefilled again
  int cached_tokens = 0;    // committed tokens loaded again from the session's prompt cache
};

}  // namespace accord
