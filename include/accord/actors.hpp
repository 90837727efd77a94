// Opt-in, for a service that runs its own CAF actor system: a distributed
// session inside it (create_in_system, after register_distributed_session_types
// on the system's config), the coordinator's typed handle (coordinator_of,
// CoordinatorActor) and the messages it takes (TransactionRequest in,
// TransactionReply out). The only public header that includes CAF.
#pragma once

#include "accord/distributed_session.hpp"
#include "actors/caf_session.hpp"
