// The phases of a session transaction: the protocol's own enum (the phase
// table in messages/phase.hpp). A single-rank session runs the local
// part of the phases its operations use; the distributed session agrees on
// every one of them across ranks.
#pragma once

#include "messages/phase.hpp"

namespace accord {

using Phase = DistributedExecutionPhase;

}  // namespace accord
