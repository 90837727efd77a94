// The CAF configuration of a session that owns its actor system. The free
// functions that make it up are public, for services that embed sessions
// in an actor system of their own (actors/caf_session.hpp).
#pragma once

#include <caf/actor_system_config.hpp>

namespace accord {

// The protocol's and the session API's message types, low-latency
// scheduling and, for a session over nodes, remote connections.
class SessionConfig : public caf::actor_system_config {
 public:
  explicit SessionConfig(bool remote);
};

}  // namespace accord
