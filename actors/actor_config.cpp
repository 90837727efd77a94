#include "actors/actor_config.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <chrono>

#include "actors/caf_session.hpp"
#include "actors/message_registry.hpp"

namespace accord {

SessionConfig::SessionConfig(bool remote) {
  register_distributed_session_types(*this);
  use_low_latency_scheduling(*this);
  if (remote) use_remote_connections(*this);
}

void register_distributed_session_types(caf::actor_system_config& config) { register_message_types(config); }

void use_low_latency_scheduling(caf::actor_system_config& config) {
  // CAF 0.17's idle worker first spins (aggressive), then polls with a
  // 50 us sleep between attempts for about 25 ms (moderate), then waits on
  // a condition variable that an arriving message notifies (relaxed). A
  // decode step leaves the workers idle for milliseconds while a rank
  // computes, so every phase round after it paid up to a sleep period per
  // hop. Without the moderate stage a message wakes a worker at once.
  config.set("work-stealing.moderate-poll-attempts", std::size_t{0});
}

void use_remote_connections(caf::actor_system_config& config) {
  config.load<caf::io::middleman>();
  // CAF 0.17 starts max(cores, 4) workers. A node's rank computes on one
  // (its pool's threads are not CAF's) and its other actors need one more;
  // a client's coordinator needs one. The rest only wake up and take cores
  // from the node that computes: with two, three nodes on two cores switch
  // threads a fifth less often and decode about 5% faster
  // (docs/perf-log.md, "Eleventh pass").
  config.set("scheduler.max-threads", std::size_t{2});
  config.set("middleman.heartbeat-interval", caf::timespan{std::chrono::milliseconds(250)});
  config.set("middleman.connection-timeout", caf::timespan{std::chrono::seconds(2)});
}

}  // namespace accord
