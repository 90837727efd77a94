// The links between a coordinator and its nodes over CAF's middleman, with
// accord's own door in front (docs/protocol.md, "Node security"):
//
// - a node's port is a NodeGate (runtime/net/node_gate.hpp), not a CAF
//   doorman: CAF sees a connection only once the handshake admitted it,
//   and the node actor is published on that connection alone;
// - a coordinator dials with the same handshake before CAF's;
// - every connection, on both sides, refuses a frame whose header claims
//   more than its limit, before anything of that size is allocated. CAF
//   0.17.6's BASP broker reads a 32-byte header, then asks its connection
//   for exactly the header's payload length (basp_broker.cpp, new_data_msg;
//   stream::prepare_next_read resizes the buffer to it). The connection is
//   where that request is bounded: it reads one byte instead, which the
//   broker finds is not the payload announced, and closes the connection
//   as it does for any malformed message.
#pragma once

#include <caf/actor_system.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "actors/interfaces.hpp"
#include "actors/node_address.hpp"
#include "runtime/net/node_gate.hpp"

namespace accord {

// The largest frame a link takes by default. The largest a session sends
// is the logits of every row of a step, rows x vocabulary x 4 bytes: 128 MB
// for 1,024 rows of a 32,000-token vocabulary.
inline constexpr std::size_t kDefaultMaxFrameBytes = std::size_t{512} << 20;

struct NodePortOptions {
  GateOptions gate;
  std::size_t max_frame_bytes = kDefaultMaxFrameBytes;
};

// A node's open port. Closing it (destroying it) stops taking connections;
// those admitted stay until CAF closes them.
class NodePort {
 public:
  using Report = NodeGate::Report;

  // Listens on `address` and publishes `node` on every connection the gate
  // admits. `report` hears why a connection was refused or closed.
  static Result<std::unique_ptr<NodePort>> open(caf::actor_system& system, NodeActor node, const NodeAddress& address,
                                                NodePortOptions options, Report report);

  std::uint16_t port() const { return gate_->port(); }
  int open_connections() const { return gate_->open_connections(); }

 private:
  explicit NodePort(std::unique_ptr<NodeGate> gate) : gate_(std::move(gate)) {}
  std::unique_ptr<NodeGate> gate_;
};

// The node actor at `address`, over a connection that passed the handshake
// with `secret`; the error says why not ("connection refused", "it
// refused: ...").
Result<NodeActor> dial_node_actor(caf::actor_system& system, const NodeAddress& address,
                                  const std::optional<Secret>& secret, std::chrono::milliseconds timeout,
                                  std::size_t max_frame_bytes = kDefaultMaxFrameBytes);

}  // namespace accord
