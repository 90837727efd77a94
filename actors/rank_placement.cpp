#include "actors/rank_placement.hpp"

#include <caf/all.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>

#include "actors/atoms.hpp"
#include "actors/node_port.hpp"
#include "messages/node_api.hpp"
#include "runtime/model/identity.hpp"
#include "runtime/model/residency.hpp"
#include "runtime/model/stage_backend.hpp"
#include "runtime/net/handshake.hpp"
#include "runtime/rank/rank_worker.hpp"

namespace accord {

namespace {

// How long a node may take to load the model, hash it and spawn its rank.
constexpr std::chrono::seconds kNodeSetupTimeout{60};
// How long connecting to a node and both handshakes may take.
constexpr std::chrono::seconds kConnectTimeout{10};
// How long a node may still see a coordinator that went away: the
// connection timeout of use_remote_connections, and a margin.
constexpr std::chrono::seconds kTakenRankPatience{3};

std::string describe_node(const NodeAddress& node, int rank) {
  return "node " + node.to_string() + " (rank " + std::to_string(rank) + ")";
}

// Every rank in this process, on the caller's model, sharing one compute
// pool.
class InProcessPlacement final : public RankPlacement {
 public:
  int rank_count(int requested) const override { return requested; }

  Status check_here(const Model& model, const Partition& partition, const DistributedOptions& options) const override {
    if (options.max_resident_bytes != 0) {
      for (int r = 0; r < partition.ranks(); ++r) {
        auto plan = plan_residency(model, partition.scope(r), options.max_resident_bytes);
        if (!plan) return Error(plan.error().code(), "rank " + std::to_string(r) + ": " + plan.error().message());
      }
    }
    return check_backend(options.backend);
  }

  // A pipeline with one sequence runs one rank at a time, so the rank whose
  // turn it is uses the whole pool.
  void prepare(const DistributedOptions& options) override {
    pool_ = std::make_shared<cpu::ThreadPool>(options.threads);
  }

  Status complete_identity(SessionActors& session) override {
    if (!session.layout->identity.empty()) return {};
    return Error(ErrorCode::contract, "in-process ranks run on this process's model, which must be loaded whole");
  }

  Status start_rank(SessionActors& session, int r, const RankOptions& options) override {
    const RankLayout& layout = *session.layout;
    auto worker =
        std::make_shared<RankWorker>(*session.model, pool_, layout.partition, r, layout.identity, options.stage);
    session.ranks[static_cast<std::size_t>(r)] =
        spawn_rank(*session.system, std::move(worker), session.session_id,
                   static_cast<RankId>(layout.partition.ranks()), session.coordinator, options);
    return {};
  }

  // A request to an exited local actor fails at once.
  std::vector<bool> exited_ranks(const SessionActors& session) const override {
    std::vector<bool> exited(session.ranks.size(), false);
    for (std::size_t r = 0; r < session.ranks.size(); ++r) {
      (*session.caller)
          ->request(session.ranks[r], std::chrono::seconds(5), dropped_atom::value)
          .receive([](std::vector<std::uint64_t>&) {}, [&](caf::error&) { exited[r] = true; });
    }
    return exited;
  }

  // An exited rank's actor lets go of what it holds (among it the
  // prompt-cache writer lock of a save it had open) only once its thread
  // has ended. Waiting for it means a rank started afresh never finds its
  // own predecessor's lock held.
  void await_exit(SessionActors& session, int r) override {
    (*session.caller)->wait_for(session.ranks[static_cast<std::size_t>(r)]);
  }

  // No rank may touch the model after the session is gone.
  void stop_ranks(caf::scoped_actor&, const std::vector<RankActor>& ranks,
                  std::vector<caf::actor>& awaited) const override {
    for (const auto& rank : ranks) awaited.push_back(caf::actor_cast<caf::actor>(rank));
  }

  bool takes_observers() const override { return true; }
  bool shares_snapshot_shelf() const override { return true; }
  bool shares_file_system() const override { return true; }
  bool counts_compute() const override { return true; }

 private:
  std::shared_ptr<cpu::ThreadPool> pool_;  // shared by the ranks
};

// Rank r on nodes_[r], an `accord node` process reached with
// dial_node_actor; a node that cannot be reached gives its rank to the
// first spare that can.
class NodePlacement final : public RankPlacement {
 public:
  NodePlacement(std::vector<NodeAddress> nodes, std::vector<NodeAddress> spares, std::optional<Secret> secret)
      : nodes_(std::move(nodes)), spares_(std::move(spares)), secret_(std::move(secret)) {}

  int rank_count(int) const override { return static_cast<int>(nodes_.size()); }
  // Remote ranks compute where their node says (`accord node --backend`)
  // and keep within its budget.
  Status check_here(const Model&, const Partition&, const DistributedOptions&) const override { return {}; }
  void prepare(const DistributedOptions&) override {}

  Status complete_identity(SessionActors& session) override {
    if (!session.layout->identity.empty()) return {};
    return identify_from_shards(session);
  }

  Status start_rank(SessionActors& session, int r, const RankOptions& options) override {
    return on_node_or_spare(r, [&] { return assign_node(session, r, options); });
  }

  // A remote rank's proxy swallows requests once its node is unreachable,
  // so the coordinator, which saw it go down, is asked.
  std::vector<bool> exited_ranks(const SessionActors& session) const override {
    std::vector<bool> exited(session.ranks.size(), false);
    (*session.caller)
        ->request(session.coordinator, std::chrono::seconds(5), down_atom::value)
        .receive(
            [&](std::vector<RankId>& down) {
              for (RankId r : down) exited.at(r) = true;
            },
            [](caf::error&) {});
    return exited;
  }

  void await_exit(SessionActors&, int) override {}

  // A remote rank is not waited for: its node stops it when the
  // coordinator goes, and an unreachable node must not hold the caller up.
  void stop_ranks(caf::scoped_actor& self, const std::vector<RankActor>& ranks,
                  std::vector<caf::actor>&) const override {
    for (const auto& rank : ranks) {
      if (rank) self->send_exit(rank, caf::exit_reason::user_shutdown);
    }
  }

  bool takes_observers() const override { return false; }
  bool shares_snapshot_shelf() const override { return false; }
  bool shares_file_system() const override { return false; }
  // A remote rank that went away would hold the caller up, and its compute
  // is its node's.
  bool counts_compute() const override { return false; }

 private:
  NodeAssignment assignment_for(const SessionActors& session, int r, const RankOptions& options) const;
  Status on_node_or_spare(int r, const std::function<Status()>& attempt);
  Status identify_from_shards(SessionActors& session);
  template <class Reply, class... Request>
  Status ask_node(SessionActors& session, int r, NodeRefusalCode& refused, const std::function<void(Reply&)>& take,
                  Request&&... request);
  Status shard_digests(SessionActors& session, int r, std::vector<std::string>& digests);
  Status assign_node(SessionActors& session, int r, const RankOptions& options);

  std::vector<NodeAddress> nodes_;   // rank r runs on nodes_[r]
  std::vector<NodeAddress> spares_;  // not yet taken
  std::optional<Secret> secret_;     // what the session proves to the nodes
};

NodeAssignment NodePlacement::assignment_for(const SessionActors& session, int r, const RankOptions& options) const {
  const RankLayout& layout = *session.layout;
  NodeAssignment assignment;
  assignment.session = session.session_id;
  assignment.rank = static_cast<RankId>(r);
  for (int q = 0; q < layout.partition.ranks(); ++q) {
    assignment.unit_counts.push_back(layout.partition.range(q).count);
  }
  assignment.model_name = std::filesystem::path(session.model->path()).filename().string();
  assignment.model_identity = layout.identity;
  assignment.tensor_digests = layout.tensor_digests;
  assignment.max_resident_bytes = options.stage.max_resident_bytes;
  assignment.kv_type = std::string(to_string(options.stage.kv_type));
  assignment.context = session.model->config().seq_len;
  assignment.expert_ranks = options.stage.expert_ranks;
  assignment.threads = layout.threads;
  assignment.phase_timeout_ms = static_cast<std::int32_t>(options.phase_timeout.count());
  assignment.faults = options.faults;
  for (const NodeAddress& node : nodes_) assignment.rank_nodes.push_back(node.to_string());
  return assignment;
}

// `attempt` on rank r's node, or, when that fails, on the first spare on
// which it succeeds; a spare that took a rank is a node of the session
// from then on.
Status NodePlacement::on_node_or_spare(int r, const std::function<Status()>& attempt) {
  Status done = attempt();
  auto& node = nodes_[static_cast<std::size_t>(r)];
  while (!done && !spares_.empty()) {
    const NodeAddress lost = node;
    node = spares_.front();
    spares_.erase(spares_.begin());
    if (attempt()) return {};
    node = lost;
  }
  return done;
}

// The identity of a model this process read no weights of: the digests of
// the nodes' shards put together (identity.hpp). Two nodes that read the
// same tensor must agree on it.
Status NodePlacement::identify_from_shards(SessionActors& session) {
  const Model& model = *session.model;
  const ModelConfig& config = model.config();
  std::vector<std::string> digests(digest_count(config));
  for (int r = 0; r < session.layout->partition.ranks(); ++r) {
    std::vector<std::string> shard;
    Status read = on_node_or_spare(r, [&] { return shard_digests(session, r, shard); });
    if (!read) return read;
    const std::string node = describe_node(nodes_[static_cast<std::size_t>(r)], r);
    if (shard.size() != digests.size()) {
      return Error(ErrorCode::architecture, node + " has a model of another shape than " + model.path());
    }
    if (auto differs = merge_digests(digests, shard)) {
      return Error(ErrorCode::architecture, node + " has another model than the nodes before it: its " +
                                                digest_name(config, *differs) + " differs");
    }
  }
  auto identity = combine_identity(config, digests);
  if (!identity)
    return Error(ErrorCode::architecture,
                 "the nodes' shards do not make the whole model: " + identity.error().message());
  session.layout->identity = std::move(*identity);
  session.layout->tensor_digests = std::move(digests);
  return {};
}

// Dials rank r's node and sends it `request...`; its reply, a refusal
// and a `Reply`, goes to `take`. A refusal, or no reply, is the call's
// error; `refused` says which refusal it was.
template <class Reply, class... Request>
Status NodePlacement::ask_node(SessionActors& session, int r, NodeRefusalCode& refused,
                               const std::function<void(Reply&)>& take, Request&&... request) {
  refused = NodeRefusalCode::none;
  const NodeAddress& address = nodes_[static_cast<std::size_t>(r)];
  auto node = dial_node_actor(*session.system, address, secret_, kConnectTimeout);
  if (!node) return Error(ErrorCode::io, "cannot reach " + describe_node(address, r) + ": " + node.error().message());
  std::optional<Error> failure;
  (*session.caller)
      ->request(*node, kNodeSetupTimeout, std::forward<Request>(request)...)
      .receive(
          [&](NodeRefusal& refusal, Reply& reply) {
            refused = refusal.code;
            if (refusal.refused()) failure = Error(ErrorCode::architecture, refusal.message);
            take(reply);
          },
          [&](caf::error& e) {
            failure = Error(ErrorCode::io, describe_node(address, r) + " did not answer: " + session.system->render(e));
            // It may still take the request later (a frozen node, a slow
            // disk): this message follows it and frees what it took.
            (*session.caller)->send(*node, release_atom::value, session.session_id);
          });
  if (failure) return *failure;
  return {};
}

// Asks rank r's node for the digests of the rank's shard.
Status NodePlacement::shard_digests(SessionActors& session, int r, std::vector<std::string>& digests) {
  NodeRefusalCode refused;
  return ask_node<std::vector<std::string>>(
      session, r, refused, [&](std::vector<std::string>& shard) { digests = std::move(shard); }, shard_atom::value,
      assignment_for(session, r, session.layout->options));
}

// Connects to rank r's node and has it start the rank (actors/node.hpp).
// A node still running the rank of a session whose coordinator just went
// away refuses until it sees it gone, within the connection timeout; it
// is asked again until then.
Status NodePlacement::assign_node(SessionActors& session, int r, const RankOptions& options) {
  const auto give_up = std::chrono::steady_clock::now() + kTakenRankPatience;
  for (;;) {
    NodeRefusalCode refused;
    Status assigned = ask_node<RankActor>(
        session, r, refused, [&](RankActor& rank) { session.ranks[static_cast<std::size_t>(r)] = std::move(rank); },
        assign_atom::value, assignment_for(session, r, options), session.coordinator);
    if (refused != NodeRefusalCode::rank_taken || std::chrono::steady_clock::now() > give_up) return assigned;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

std::unique_ptr<RankPlacement> place_in_process() { return std::make_unique<InProcessPlacement>(); }

Result<std::unique_ptr<RankPlacement>> place_on_nodes(const std::vector<NodeAddress>& peers,
                                                      const DistributedOptions& options) {
  if (peers.empty()) return Error(ErrorCode::contract, "a remote session needs at least one node");
  // A node serves one rank, spares included.
  std::vector<NodeAddress> every_node = peers;
  every_node.insert(every_node.end(), options.spares.begin(), options.spares.end());
  if (Status ok = check_distinct_nodes(every_node); !ok) return ok.error();
  auto secret = secret_from(options.secret_file);
  if (!secret) return secret.error();
  return std::unique_ptr<RankPlacement>(std::make_unique<NodePlacement>(peers, options.spares, std::move(*secret)));
}

}  // namespace accord
