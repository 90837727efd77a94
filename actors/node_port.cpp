#include "actors/node_port.hpp"

#include <spdlog/spdlog.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/scribe_impl.hpp>

namespace accord {

namespace {

// A connection that refuses a frame over its limit (see node_port.hpp)
// rather than resize its buffer to it. (Closing itself from inside the
// broker's handler instead left the node deaf to the next coordinator.) On
// a node it holds its slot of the node's connection limit.
class BoundedScribe final : public caf::io::network::scribe_impl {
 public:
  BoundedScribe(caf::io::network::default_multiplexer& mx, UniqueFd fd, std::size_t max_frame_bytes,
                std::optional<ConnectionSlot> slot, NodePort::Report report)
      : scribe_impl(mx, fd.release()),
        max_frame_bytes_(max_frame_bytes),
        slot_(std::move(slot)),
        report_(std::move(report)) {}

  void configure_read(caf::io::receive_policy::config config) override {
    if (config.second <= max_frame_bytes_) {
      scribe_impl::configure_read(config);
      return;
    }
    if (report_) {
      report_(addr() + ":" + std::to_string(port()) + ": closed, a frame of " + std::to_string(config.second) +
              " bytes is over the limit of " + std::to_string(max_frame_bytes_));
    }
    // One byte instead: the broker finds it is not the payload the header
    // announced and closes the connection its own way (malformed message),
    // as it does for any garbage.
    scribe_impl::configure_read(caf::io::receive_policy::exactly(1));
  }

 private:
  std::size_t max_frame_bytes_;
  std::optional<ConnectionSlot> slot_;
  NodePort::Report report_;
};

caf::io::network::default_multiplexer& multiplexer(caf::actor_system& system) {
  return static_cast<caf::io::network::default_multiplexer&>(system.middleman().backend());
}

caf::actor basp_broker(caf::actor_system& system) {
  return system.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
}

// CAF 0.17.6's BASP broker starts a new outgoing connection's last-seen
// time at zero, so a heartbeat tick that falls into its handshake drops it
// with connection_timeout; another attempt then succeeds.
constexpr int kConnectAttempts = 3;

}  // namespace

Result<std::unique_ptr<NodePort>> NodePort::open(caf::actor_system& system, NodeActor node, const NodeAddress& address,
                                                 NodePortOptions options, Report report) {
  auto listener = listen_on(address.host, address.port);
  if (!listener) return listener.error();
  const std::uint16_t port = local_port(listener->get());
  const std::size_t max_frame_bytes = options.max_frame_bytes;
  // The gate's thread hands each admitted connection to the BASP broker,
  // which writes its server handshake, naming `node`, as for a connection
  // its own doorman had accepted. What every connection needs is looked up
  // once, here, not on the gate's thread per connection.
  auto& mx = multiplexer(system);
  auto broker = basp_broker(system);
  auto published = caf::actor_cast<caf::strong_actor_ptr>(node);
  auto interface = system.message_types<NodeActor>();
  auto admit = [&mx, broker, published, interface, port, max_frame_bytes, report](UniqueFd fd, ConnectionSlot slot) {
    caf::io::scribe_ptr scribe =
        caf::make_counted<BoundedScribe>(mx, std::move(fd), max_frame_bytes, std::move(slot), report);
    caf::anon_send(broker, caf::publish_atom::value, std::move(scribe), port, published, interface);
  };
  auto gate = std::make_unique<NodeGate>(std::move(*listener), std::move(options.gate), std::move(admit), report);
  return std::unique_ptr<NodePort>(new NodePort(std::move(gate)));
}

Result<NodeActor> dial_node_actor(caf::actor_system& system, const NodeAddress& address,
                                  const std::optional<Secret>& secret, std::chrono::milliseconds timeout,
                                  std::size_t max_frame_bytes) {
  caf::scoped_actor self{system};
  const auto broker = basp_broker(system);
  for (int attempt = 1;; ++attempt) {
    auto fd = dial_node(address.host, address.port, secret, timeout);
    if (!fd) return fd.error();
    caf::io::scribe_ptr scribe =
        caf::make_counted<BoundedScribe>(multiplexer(system), std::move(*fd), max_frame_bytes, std::nullopt, nullptr);
    std::optional<Result<NodeActor>> reached;
    caf::error failure;
    self->request(broker, timeout, caf::connect_atom::value, std::move(scribe), address.port)
        .receive(
            [&](caf::node_id&, caf::strong_actor_ptr& actor, std::set<std::string>& interface) {
              if (!actor || !system.assignable<NodeActor>(interface)) {
                reached = Error(ErrorCode::io, "it is not an accord node of this version");
              } else {
                reached = caf::actor_cast<NodeActor>(std::move(actor));
              }
            },
            [&](caf::error& e) { failure = std::move(e); });
    if (reached) return std::move(*reached);
    if (failure != caf::sec::connection_timeout || attempt == kConnectAttempts) {
      return Error(ErrorCode::io, system.render(failure));
    }
  }
}

}  // namespace accord
