// The door of a node (`accord node`): it accepts the connections to the
// node's port, runs the node's side of the handshake with each
// (runtime/net/handshake.hpp) on a thread of its own, and hands on only the
// admitted ones (actors/node_port.hpp gives them to CAF). Whatever a peer
// sends before it is admitted is read into a buffer of at most a
// handshake's size, so bytes from anyone never reach CAF.
//
// It turns away at once, without a secret, a peer not on loopback; a peer
// whose address has as many handshakes in progress as it takes; and, when
// every slot holds an admitted connection, any peer. It closes a handshake
// not finished within the timeout. No CAF inside.
//
// A handshake never keeps a coordinator out: at the connection limit a new
// peer takes the slot of the oldest handshake in progress. A coordinator
// that holds the secret finishes its handshake in one round trip, so only
// a flood that fills every slot within that round trip can crowd it out;
// one that opens connections and says nothing, reopened as they time out,
// cannot.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/net/handshake.hpp"
#include "runtime/net/socket.hpp"

namespace accord {

struct GateOptions {
  std::optional<Secret> secret;  // none: loopback peers only
  int max_connections = 64;      // handshaking and admitted, together
  std::chrono::milliseconds handshake_timeout{5000};
  // Handshakes in progress from one peer address (its host, any port): one
  // address cannot take every slot, or keep taking the oldest.
  int max_handshakes_per_address = 4;
};

// One connection of a node, counted against the node's limit while it
// lives.
class ConnectionSlot {
 public:
  explicit ConnectionSlot(std::shared_ptr<std::atomic<int>> count);
  ConnectionSlot(ConnectionSlot&&) noexcept = default;
  ConnectionSlot& operator=(ConnectionSlot&& other) noexcept;
  ConnectionSlot(const ConnectionSlot&) = delete;
  ConnectionSlot& operator=(const ConnectionSlot&) = delete;
  ~ConnectionSlot();

 private:
  std::shared_ptr<std::atomic<int>> count_;
};

class NodeGate {
 public:
  // Takes an admitted connection, and its slot for as long as it is open.
  using Admit = std::function<void(UniqueFd, ConnectionSlot)>;
  // Hears why a peer was turned away ("127.0.0.1:5000: the handshake timed out").
  using Report = std::function<void(const std::string&)>;

  // Starts the gate's thread on `listener` (listen_on).
  NodeGate(UniqueFd listener, GateOptions options, Admit admit, Report report);
  // Stops accepting and closes the handshakes in progress; connections
  // already admitted are the taker's.
  ~NodeGate();
  NodeGate(const NodeGate&) = delete;
  NodeGate& operator=(const NodeGate&) = delete;

  std::uint16_t port() const;
  // Connections open now: handshaking, and admitted ones whose slot lives.
  int open_connections() const { return open_->load(); }

 private:
  struct Pending;
  void run();
  void accept_all(std::vector<Pending>& pending);
  bool advance(Pending& peer);
  Verdict admission(const sockaddr_storage& address, std::vector<Pending>& pending);
  bool make_room(std::vector<Pending>& pending);
  void turn_away(UniqueFd fd, Verdict verdict, const std::string& peer);

  UniqueFd listener_;
  GateOptions options_;
  Admit admit_;
  Report report_;
  std::shared_ptr<std::atomic<int>> open_ = std::make_shared<std::atomic<int>>(0);
  UniqueFd stop_read_;
  UniqueFd stop_write_;
  UniqueFd spare_;  // given up to accept, and close, a peer when out of descriptors
  std::thread thread_;
};

}  // namespace accord
