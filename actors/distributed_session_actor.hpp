// The coordinator behind a DistributedSession, for callers that speak to
// the session in typed messages from their own actors: send it a
// TransactionRequest (messages/session_api.hpp) and it answers one
// TransactionReply per transaction. Includes CAF, unlike
// distributed_session.hpp.
#pragma once

#include "actors/distributed_session.hpp"
#include "actors/interfaces.hpp"

namespace accord {

CoordinatorActor coordinator_of(const DistributedSession& session);
// Rank `rank`'s actor (0 <= rank < session.ranks()), for tests
// and fault scenarios that speak the protocol to a rank directly.
RankActor rank_actor_of(const DistributedSession& session, int rank);

}  // namespace accord
