// accord node: run a rank of a remote cluster in this process for each of
// up to --slots coordinators elsewhere (`accord generate --peers`, `accord
// serve --peers`, DistributedSession::connect). Publishes the node actor (actors/node.hpp) on --listen and
// runs until SIGINT or SIGTERM.
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <memory>
#include <thread>

#include "actors/atoms.hpp"
#include "actors/caf_session.hpp"
#include "actors/distributed_session.hpp"
#include "actors/node.hpp"
#include "actors/node_address.hpp"
#include "actors/node_port.hpp"
#include "apps/accord/commands.hpp"
#include "apps/accord/options.hpp"
#include "runtime/base/environment.hpp"

namespace accord::cli {

namespace {

struct NodeArgs {
  std::string listen;
  std::string model;
  std::string model_dir;
  std::string prompt_cache_dir;
  bool allow_faults = false;
  std::string secret_file;
  int max_connections = GateOptions{}.max_connections;
  std::size_t max_frame_bytes = kDefaultMaxFrameBytes;
  std::uint64_t max_resident_bytes = 0;
  int context = kDefaultContext;  // --ctx-size
  int slots = NodeOptions{}.slots;
  std::uint64_t kv_budget_bytes = 0;
  BackendArgs compute;  // --backend, --devices
};

class NodeConfig : public caf::actor_system_config {
 public:
  explicit NodeConfig(int slots) {
    register_distributed_session_types(*this);
    use_low_latency_scheduling(*this);
    use_remote_connections(*this);
    // A rank's compute phase holds a scheduler thread for its duration
    // (actors/rank_actors.hpp): a thread per slot lets every session
    // compute at once, and one more keeps the node's other actors moving.
    // One slot keeps use_remote_connections' two.
    set("scheduler.max-threads", static_cast<std::size_t>(slots) + 1);
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
// 1, so that stopping a node never takes kill -9. One such hang was found
// and fixed (a detached actor kept alive by the middleman; actors/node.hpp
// keeps detached actors from other nodes); this bounds any that remains
// unknown.
void exit_if_not_stopped_in(std::chrono::seconds limit) {
  std::thread([limit] {
    std::this_thread::sleep_for(limit);
    spdlog::error("accord node: not stopped {} s after the signal; exiting without a clean shutdown", limit.count());
    ::_exit(1);
  }).detach();
}

// Below this not even a small model's messages would pass.
constexpr std::size_t kMinFrameBytes = std::size_t{1} << 20;

// A folder the node's option names, which must exist.
Result<std::filesystem::path> existing_folder(const std::string& path, const std::string& option) {
  std::error_code error;
  if (!std::filesystem::is_directory(path, error)) {
    return Error(ErrorCode::contract, option + " " + printable(path) + " is not a folder");
  }
  return std::filesystem::path(path);
}

// The node's own settings, checked before it listens.
Result<NodeOptions> node_options(const NodeArgs& args, const NodeAddress& listen) {
  NodeOptions options;
  options.name = "node " + listen.to_string();
  options.allow_faults = args.allow_faults;
  options.max_resident_bytes = args.max_resident_bytes;
  options.max_context = args.context;
  options.slots = args.slots;
  options.kv_budget_bytes = args.kv_budget_bytes;
  auto backend = checked_backend(args.compute);
  if (!backend) return backend.error();
  options.backend = *backend;
  if (!args.model.empty()) {
    // Only the header: the node reads the tensors of the rank it is given.
    auto header = Model::read_header(args.model);
    if (!header) return header.error();
    options.model = args.model;
  } else if (!args.model_dir.empty()) {
    auto folder = existing_folder(args.model_dir, "--model-dir");
    if (!folder) return folder.error();
    options.model_dir = std::move(*folder);
  } else {
    return Error(ErrorCode::contract,
                 "a node needs --model FILE or --model-dir FOLDER: it never opens a path a "
                 "coordinator sends");
  }
  if (!args.prompt_cache_dir.empty()) {
    auto folder = existing_folder(args.prompt_cache_dir, "--prompt-cache-dir");
    if (!folder) return folder.error();
    options.prompt_cache_dir = std::move(*folder);
  }
  return options;
}

// Says at start who may connect, so that an operator sees it.
void log_admission(const NodeAddress& bound, const GateOptions& gate) {
  if (!gate.secret) {
    spdlog::warn("accord node: no --secret-file: only peers on this machine (loopback) are admitted");
  } else if (bound.host == "0.0.0.0" || bound.host == "::") {
    spdlog::info("accord node: listening on every interface; peers must prove the secret");
  }
}

int run_node(const NodeArgs& args) {
  auto listen = parse_node_address(args.listen, true);
  if (!listen) return fail(listen.error().message());
  auto options = node_options(args, *listen);
  if (!options) return fail(options.error().message());
  auto environment = read_environment();
  if (!environment) return fail(environment.error().message());
  auto secret = secret_from(environment->secret_file_for(args.secret_file));
  if (!secret) return fail(secret.error().message());
  options->secret = *secret;
  if (args.max_connections < 1) return fail("--max-connections must be at least 1");
  if (args.max_frame_bytes < kMinFrameBytes) return fail("--max-frame-bytes must be at least 1 MiB");
  NodePortOptions port_options{GateOptions{std::move(*secret), args.max_connections}, args.max_frame_bytes};
  const sigset_t signals = stop_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  spdlog::flush_on(spdlog::level::info);
  NodeConfig config(args.slots);
  caf::actor_system system{config};
  auto node = spawn_node(system, std::move(*options));
  auto log_refusal = [](const std::string& why) { spdlog::warn("accord node: {}", printable(why)); };
  auto port = NodePort::open(system, node, *listen, port_options, log_refusal);
  if (!port) {
    caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
    return fail("cannot listen on " + listen->to_string() + ": " + port.error().message());
  }
  const NodeAddress bound{listen->host, (*port)->port()};
  // With port 0 the node's name is known only now; it is told before the
  // port is printed, so before any coordinator can know where to connect.
  caf::anon_send(node, name_atom::value, "node " + bound.to_string());
  log_admission(bound, port_options.gate);
  spdlog::info("accord node: listening on {}", bound.to_string());
  int signal = 0;
  sigwait(&signals, &signal);
  spdlog::info("accord node: {} received, stopping", signal == SIGINT ? "SIGINT" : "SIGTERM");
  exit_if_not_stopped_in(kStopLimit);
  // The port closes first: no coordinator connects while the node stops.
  // The node stops its rank on exit; ~actor_system waits for every actor.
  port->reset();
  caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
  return 0;
}

}  // namespace

Command add_node_command(CLI::App& app) {
  auto args = std::make_shared<NodeArgs>();
  CLI::App* cmd =
      app.add_subcommand("node", "Run a rank of a remote cluster for each of up to --slots coordinators elsewhere");
  cmd->add_option("--listen", args->listen, "address to listen on, HOST:PORT (port 0: the system picks one)")
      ->required();
  cmd->add_option("--model", args->model,
                  "the model it serves (its header checked at start; a rank reads only its own tensors); "
                  "a session's must be the same");
  cmd->add_option("--model-dir", args->model_dir,
                  "without --model: serve the models of this folder, each session's by its file name")
      ->excludes(cmd->get_option("--model"));
  cmd->add_option("--prompt-cache-dir", args->prompt_cache_dir,
                  "folder of its ranks' prompt caches; a coordinator's --prompt-cache names one inside it "
                  "(default: none, prompt caches are refused)");
  cmd->add_flag("--allow-faults", args->allow_faults, "take the fault plans coordinators send (test clusters only)");
  cmd->add_option("--secret-file", args->secret_file,
                  "file of the cluster's shared secret (or ACCORD_SECRET_FILE); coordinators and the "
                  "session's other nodes must prove it. Without one only loopback peers are admitted");
  cmd->add_option("--max-connections", args->max_connections,
                  "connections open at once, handshaking or admitted; at the limit a new peer takes the slot of "
                  "the oldest handshake, so only admitted connections keep a coordinator out. Each address has "
                  "at most " +
                      std::to_string(GateOptions{}.max_handshakes_per_address) + " handshakes in progress")
      ->capture_default_str();
  cmd->add_option("--max-frame-bytes", args->max_frame_bytes,
                  "largest message a connection takes; a larger one closes it")
      ->check(whole_number_range())
      ->capture_default_str();
  cmd->add_option("--max-resident-bytes", args->max_resident_bytes,
                  "keep at most this many bytes of the rank's weights in memory, streaming the other layers each "
                  "step (default 0: all resident, or the coordinator's budget)")
      ->check(whole_number_range());
  cmd->add_option("--slots", args->slots,
                  "sessions served at once, each its own rank, keys and values and threads over one copy of the "
                  "weights (serve --peers --parallel K needs K); a session past them is refused")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  add_kv_budget_option(*cmd, args->kv_budget_bytes, "the sessions' ranks");
  cmd->add_option("--ctx-size", args->context,
                  "the most positions a session's rank may hold here (each keeps keys and values for all of "
                  "them); a coordinator asking for more is refused")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  add_backend_options(*cmd, args->compute);
  return [args] { return run_node(*args); };
}

}  // namespace accord::cli
