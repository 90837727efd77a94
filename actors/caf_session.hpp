// Opt-in: a DistributedSession inside the caller's CAF actor system, for
// services that speak to the session in typed messages from their own
// actors. Includes CAF, unlike actors/distributed_session.hpp.
//
// The coordinator answers a TransactionRequest (messages/session_api.hpp)
// with one TransactionReply per transaction.
#pragma once

#include <memory>

#include "actors/distributed_session.hpp"
#include "actors/interfaces.hpp"

namespace caf {
class actor_system;
class actor_system_config;
}  // namespace caf

namespace accord {

// A session inside the caller's actor system, whose config must have had
// register_distributed_session_types() applied.
Result<std::unique_ptr<DistributedSession>> create_in_system(caf::actor_system& system, const Model& model,
                                                             const DistributedOptions& options);

// Adds the message types of the protocol and of the session API to a
// config, as every node of a cluster must.
void register_distributed_session_types(caf::actor_system_config& config);

// Tunes CAF's work-stealing scheduler for the protocol's short message
// rounds (a session with its own actor system does this itself). A service
// that embeds sessions may call it on its config; its own actors then see
// the same short wake-up latency.
void use_low_latency_scheduling(caf::actor_system_config& config);

// Loads CAF's middleman (TCP between nodes) with heartbeats on: CAF 0.17.6
// leaves them off, and then a frozen peer whose connection stays open is
// never noticed. A node whose heartbeats stop for two seconds is dropped,
// and its ranks go down. It also runs two scheduler threads instead of
// CAF's default of at least four. connect() and `accord node` use it.
void use_remote_connections(caf::actor_system_config& config);

// The session's coordinator.
CoordinatorActor coordinator_of(const DistributedSession& session);
// Rank `rank`'s actor (0 <= rank < session.ranks()), for tests
// and fault scenarios that speak the protocol to a rank directly.
RankActor rank_actor_of(const DistributedSession& session, int rank);

}  // namespace accord
