// accord node: run one rank of a remote cluster in this process, for a
// coordinator elsewhere (`accord generate --peers`, DistributedSession::
// connect). Publishes the node actor (actors/node.hpp) on --listen and
// runs until SIGINT or SIGTERM.
#include <CLI/CLI.hpp>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <chrono>
#include <csignal>
#include <memory>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <thread>
#include <unistd.h>

#include "actors/atoms.hpp"
#include "actors/distributed_session.hpp"
#include "actors/node.hpp"
#include "actors/node_address.hpp"
#include "apps/accord/commands.hpp"

namespace accord::cli {

namespace {

struct NodeArgs {
  std::string listen;
  std::string model;
};

class NodeConfig : public caf::actor_system_config {
 public:
  NodeConfig() {
    register_distributed_session_types(*this);
    use_low_latency_scheduling(*this);
    use_remote_connections(*this);
  }
};

// SIGINT and SIGTERM, blocked in every thread (CAF's threads inherit the
// mask of the thread that starts them) so that only sigwait sees them.
sigset_t stop_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  return signals;
}

// How long a stop may take before the node gives up on a clean one. A stop
// takes milliseconds; the margin keeps a slow but clean one on a loaded
// machine from being cut short.
constexpr auto kStopLimit = std::chrono::seconds(5);

// A last resort, not the fix: should the actor system still not have shut
// down `kStopLimit` after the signal, the node says so and exits with status
// 1, so that stopping a node never takes kill -9. Issue 16 was such a hang
// (a detached actor kept alive by the middleman; actors/node.hpp keeps
// detached actors from other nodes); this bounds any that remains unknown.
void exit_if_not_stopped_in(std::chrono::seconds limit) {
  std::thread([limit] {
    std::this_thread::sleep_for(limit);
    spdlog::error("accord node: not stopped {} s after the signal; exiting without a clean shutdown", limit.count());
    ::_exit(1);
  }).detach();
}

int run_node(const NodeArgs& args) {
  auto listen = parse_node_address(args.listen, true);
  if (!listen) return fail(listen.error().message());
  std::shared_ptr<const Model> model;
  if (!args.model.empty()) {
    auto loaded = Model::load(args.model);
    if (!loaded) return fail(loaded.error().message());
    model = std::make_shared<const Model>(std::move(*loaded));
  }
  const sigset_t signals = stop_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  spdlog::flush_on(spdlog::level::info);
  NodeConfig config;
  caf::actor_system system{config};
  auto node = spawn_node(system, NodeOptions{"node " + listen->to_string(), model});
  // Only the given address, never every interface; SO_REUSEADDR so that a
  // restarted node gets its port back while old connections linger.
  auto port = system.middleman().publish(node, listen->port, listen->host.c_str(), true);
  if (!port) {
    caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
    return fail("cannot listen on " + listen->to_string() + ": " + system.render(port.error()));
  }
  const NodeAddress bound{listen->host, *port};
  // With port 0 the node's name is known only now; it is told before the
  // port is printed, so before any coordinator can know where to connect.
  caf::anon_send(node, name_atom::value, "node " + bound.to_string());
  spdlog::info("accord node: listening on {}", bound.to_string());
  int signal = 0;
  sigwait(&signals, &signal);
  spdlog::info("accord node: {} received, stopping", signal == SIGINT ? "SIGINT" : "SIGTERM");
  exit_if_not_stopped_in(kStopLimit);
  // Unpublished first: no coordinator connects while the node stops. The
  // node stops its rank on exit; ~actor_system waits for every actor.
  system.middleman().unpublish(node, bound.port);
  caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
  return 0;
}

}  // namespace

Command add_node_command(CLI::App& app) {
  auto args = std::make_shared<NodeArgs>();
  CLI::App* cmd = app.add_subcommand("node", "Run one rank of a remote cluster for a coordinator elsewhere");
  cmd->add_option("--listen", args->listen, "address to listen on, HOST:PORT (port 0: the system picks one)")
      ->required();
  cmd->add_option("--model", args->model,
                  "model to load at start (default: the path the coordinator sends); its identity must be the "
                  "session's");
  return [args] { return run_node(*args); };
}

}  // namespace accord::cli
