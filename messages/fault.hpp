// One entry of a fault plan (runtime/fault/fault_plan.hpp parses, checks
// and counts them): which rank fails, in which phase, how, and at which
// occurrence. A value on the wire too: a coordinator sends its plan to the
// nodes as it is, never as text to parse again.
#pragma once

#include <cstdint>

#include "messages/phase.hpp"

namespace accord {

enum class FaultKind : std::uint8_t {
  error,    // the rank reports a failed status for the phase
  throws,   // the rank's local work throws an exception ("throw")
  delay,    // the rank's local work outlasts the phase deadline
  exit,     // the rank's actors exit (a node: its process exits)
  drop,     // the rank's status message for the phase is lost
  corrupt,  // bytes of the rank's prompt-cache shard are flipped once written
};

struct Fault {
  RankId rank = 0;
  DistributedExecutionPhase phase = DistributedExecutionPhase::Execution;
  // For the boundary phases: that route only; none (the default): every
  // route the rank is an end of.
  CommunicationRouteId route;
  FaultKind kind = FaultKind::error;
  // Fires once, the occurrence-th time the rank runs a matching phase.
  std::uint32_t occurrence = 1;

  bool matches(const PhaseId& id) const {
    if (id.phase != phase) return false;
    if (!route.is_none()) return id.route == route;
    return !is_boundary_phase(phase) || id.route.source == rank || id.route.target == rank;
  }
  bool operator==(const Fault&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Fault& x) {
  return f(x.rank, x.phase, x.route, x.kind, x.occurrence);
}

}  // namespace accord
