// The phases of a session transaction: the protocol's own enum (the phase
// table in messages/phase.hpp). A single-rank session runs the local
// part of the phases its operations use; the distributed session agrees on
// every one of them across ranks.
#pragma once

#include <functional>

#include "messages/phase.hpp"

namespace accord {

using Phase = DistributedExecutionPhase;

// Told how long a phase's local work took on a rank, for metrics. A phase
// that waited for another rank's data counts its last run only: the wait
// is not its work.
using PhaseTimer = std::function<void(const PhaseId& phase, double seconds)>;

}  // namespace accord
