#include "actors/node.hpp"

#include <spdlog/spdlog.h>
#include <caf/all.hpp>
#include <map>

#include "actors/atoms.hpp"
#include "actors/node_address.hpp"
#include "actors/node_port.hpp"
#include "actors/rank_actors.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "messages/node_api.hpp"
#include "runtime/fault/fault_plan.hpp"
#include "runtime/io/env.hpp"
#include "runtime/model/identity.hpp"
#include "runtime/model/kv_pool.hpp"
#include "runtime/model/residency.hpp"
#include "runtime/rank/expert_placement.hpp"
#include "runtime/rank/partition.hpp"
#include "runtime/rank/rank_worker.hpp"

namespace accord {

namespace {

// The reply to an assignment: no refusal and the rank's actor, or why the
// node refused.
using AssignReply = std::tuple<NodeRefusal, RankActor>;
// The reply to a request for a shard's digests: no refusal and the
// digests, or why the node cannot read the shard.
using ShardReply = std::tuple<NodeRefusal, std::vector<std::string>>;

NodeRefusal refusal(NodeRefusalCode code, const Error& why) { return {code, why.message()}; }

// A session the node serves: its rank, the coordinator it answers to, and
// the nodes of the session's later ranks it connected to.
struct SessionSlot {
  RankActor rank;
  CoordinatorActor coordinator;
  std::vector<NodeActor> later_nodes;  // (connect_to_later_ranks)
};

struct NodeState {
  NodeOptions options;
  // Every shard the node loaded that a session's rank may still run, so a
  // session asking for a shard another runs shares its one copy; a shard
  // goes when its last rank does (each rank's worker holds its model).
  std::vector<std::weak_ptr<const Model>> loaded;
  std::shared_ptr<const Model> kept;          // the last loaded, kept for the next session that asks for it
  std::map<SessionId, SessionSlot> sessions;  // by session id, at most options.slots
  std::shared_ptr<KvPool> kv_pool;            // the sessions' keys and values, under options.kv_budget_bytes
};

using NodePointer = NodeActor::stateful_pointer<NodeState>;

// Stops the rank the node runs for `session`, if any, and frees its slot.
void release_session(NodePointer self, SessionId session) {
  auto& s = self->state;
  auto slot = s.sessions.find(session);
  if (slot == s.sessions.end()) return;
  self->send_exit(slot->second.rank, caf::exit_reason::user_shutdown);
  self->demonitor(slot->second.coordinator.address());
  s.sessions.erase(slot);
}

// Stops every rank the node runs.
void release_all(NodePointer self) {
  while (!self->state.sessions.empty()) release_session(self, self->state.sessions.begin()->first);
}

// How long a node waits for another node of its session to answer.
constexpr auto kPeerConnectTimeout = std::chrono::seconds(2);

// Connects to the nodes of the ranks after this one (each pair of nodes
// once), so that CAF routes what the ranks send each other over those
// connections instead of through the coordinator's process: BASP takes a
// direct connection over an indirect route for every message. A node it
// cannot reach is only slower to reach (through the coordinator), so that
// is a warning, not a refusal.
void connect_to_later_ranks(NodePointer self, const NodeAssignment& assignment, SessionSlot& slot) {
  auto& s = self->state;
  const auto& nodes = assignment.rank_nodes;
  if (assignment.rank >= nodes.size()) return;
  const std::string& own = nodes[assignment.rank];
  for (std::size_t r = assignment.rank + 1; r < nodes.size(); ++r) {
    if (nodes[r] == own) continue;
    auto address = parse_node_address(nodes[r]);
    auto node = address ? dial_node_actor(self->system(), *address, s.options.secret, kPeerConnectTimeout)
                        : Result<NodeActor>(address.error());
    if (node) {
      spdlog::info("{}: connected to rank {}'s node {}", s.options.name, r, nodes[r]);
      slot.later_nodes.push_back(std::move(*node));
    } else {
      spdlog::warn("{}: cannot connect to rank {}'s node {} ({}); its data goes through the coordinator",
                   s.options.name, r, printable(nodes[r]), printable(node.error().message()));
    }
  }
}

// A session's coordinator assigns it again on a reset or a heal: that
// replaces its rank. No other coordinator may take a running session's id,
// and a new session needs a free slot.
Status check_slot(const NodeState& s, const NodeAssignment& assignment, const CoordinatorActor& coordinator) {
  auto held = s.sessions.find(assignment.session);
  if (held != s.sessions.end()) {
    if (held->second.coordinator == coordinator) return {};
    return Error(ErrorCode::state, s.options.name + " runs a rank of another session with the same id");
  }
  if (s.sessions.size() < static_cast<std::size_t>(s.options.slots)) return {};
  return Error(ErrorCode::state, s.options.name + " runs " + std::to_string(s.sessions.size()) +
                                     " session(s), as many as its --slots; it takes another when one of "
                                     "their coordinators is gone");
}

// The threads of the rank's pool: the coordinator's count, which knows
// nothing of this machine's cores, capped at cpu::max_useful_threads().
int node_threads(const NodeState& s, int requested) {
  const int limit = cpu::max_useful_threads();
  if (requested <= limit) return requested;
  spdlog::warn("{}: the coordinator asks for {} threads, more than {} per core of this machine; using {}",
               s.options.name, requested, cpu::kThreadsPerCore, limit);
  return limit;
}

Status check_rank_in_partition(const NodeAssignment& assignment) {
  if (assignment.rank < assignment.unit_counts.size()) return {};
  return Error(ErrorCode::contract, "rank " + std::to_string(assignment.rank) + " is outside the partition");
}

// The partition of an assignment, checked against a model of `config`.
Result<Partition> assigned_partition(const ModelConfig& config, const NodeAssignment& assignment) {
  if (Status ok = check_rank_in_partition(assignment); !ok) return ok.error();
  const std::vector<int> counts(assignment.unit_counts.begin(), assignment.unit_counts.end());
  return Partition::from_counts(config.n_layers, counts);
}

// The file of the session's model: the node's --model, or the file of its
// --model-dir the assignment names.
Result<std::filesystem::path> model_file(const NodeState& s, const NodeAssignment& assignment) {
  if (!s.options.model.empty()) return s.options.model;
  auto path = entry_in(s.options.model_dir, assignment.model_name, "the session's model file name");
  if (!path) return Error(ErrorCode::contract, s.options.name + ": " + path.error().message());
  return *path;
}

// How a refusal of a model that is not the session's begins.
std::string another_model(const NodeState& s, const std::filesystem::path& file, const NodeAssignment& assignment) {
  const std::string identity = assignment.model_identity.empty() ? "" : " (identity " + assignment.model_identity + ")";
  return s.options.name + " has another model named '" + printable(file.filename().string()) + "' than the session's" +
         identity + ": ";
}

// The shard of `path` for `scope` and `context` positions, if the node
// holds it: one a session runs, or the one kept; none otherwise.
std::shared_ptr<const Model> held_shard(NodeState& s, const std::string& path, const WeightScope& scope, int context) {
  std::erase_if(s.loaded, [](const std::weak_ptr<const Model>& shard) { return shard.expired(); });
  for (const auto& weak : s.loaded) {
    auto shard = weak.lock();
    if (shard && shard->path() == path && shard->scope() == scope && shard->config().seq_len == context) return shard;
  }
  return nullptr;
}

// The rank's shard of the session's model: only the tensors of its units,
// and the embedding or the head where it has them, read and digested
// (docs/residency.md); the one the node holds when it is that shard of
// that file. The coordinator hears only what concerns the model it named;
// why a file failed to load goes to the node's log.
Result<std::shared_ptr<const Model>> shard_model(NodePointer self, const NodeAssignment& assignment) {
  auto& s = self->state;
  if (Status ok = check_rank_in_partition(assignment); !ok) return ok.error();
  auto path = model_file(s, assignment);
  if (!path) return path.error();
  auto cannot_load = [&](const Error& why) {
    spdlog::warn("{}: cannot load {}: {}", s.options.name, printable(path->string()), printable(why.message()));
    return Error(why.code(), s.options.name + " cannot load '" + printable(path->filename().string()) +
                                 "' from its model " + (s.options.model.empty() ? "directory" : "file") +
                                 " (its log says why)");
  };
  auto header = Model::read_header(path->string());
  if (!header) return cannot_load(header.error());
  // The rank is in the partition: a partition that does not fit is the model's doing.
  auto partition = assigned_partition(header->config, assignment);
  if (!partition) {
    return Error(ErrorCode::architecture, another_model(s, *path, assignment) + partition.error().message());
  }
  auto experts = ExpertPlacement::make(*partition, header->config, assignment.expert_ranks);
  if (!experts) return experts.error();
  const WeightScope scope = experts->scope(*partition, static_cast<int>(assignment.rank));
  ModelLoad load{scope, node_threads(s, assignment.threads)};
  load.context = assignment.context;
  const int context = fitted_context(header->config.seq_len, load);
  if (auto held = held_shard(s, path->string(), scope, context)) return s.kept = std::move(held);
  s.kept.reset();  // the old shard goes before the new one is read, unless a session runs it
  auto loaded = Model::load(path->string(), load);
  if (!loaded) return cannot_load(loaded.error());
  s.kept = std::make_shared<const Model>(std::move(*loaded));
  s.loaded.push_back(s.kept);
  spdlog::info("{}: read rank {}'s shard of {}", s.options.name, assignment.rank, printable(path->string()));
  return s.kept;
}

// Whether the shard's tensors are the session's: the digests the
// assignment lists, with the shard's configuration, must make the
// session's identity, and those of the shard's tensors must be its own.
Status check_shard(const NodeState& s, const Model& shard, const NodeAssignment& assignment) {
  const std::string model = another_model(s, shard.path(), assignment);
  auto identity = combine_identity(shard.config(), assignment.tensor_digests);
  if (!identity || *identity != assignment.model_identity) {
    return Error(ErrorCode::architecture, model + "its configuration or tensor count differs");
  }
  std::vector<std::string> session = assignment.tensor_digests;
  if (auto differs = merge_digests(session, shard.tensor_digests())) {
    return Error(ErrorCode::architecture, model + digest_name(shard.config(), *differs) + " differs");
  }
  return {};
}

// The rank's worker; it keeps the model it reads alive, since the rank's
// actor may outlive the node actor at shutdown.
Result<std::shared_ptr<RankWorker>> make_worker(const NodeState& s, std::shared_ptr<const Model> model,
                                                const NodeAssignment& assignment) {
  auto partition = assigned_partition(model->config(), assignment);
  if (!partition) return partition.error();
  if (assignment.threads < 1) return Error(ErrorCode::contract, "each rank needs at least one thread");
  const int rank = static_cast<int>(assignment.rank);
  const std::uint64_t budget =
      s.options.max_resident_bytes != 0 ? s.options.max_resident_bytes : assignment.max_resident_bytes;
  if (budget != 0) {
    auto plan = plan_residency(*model, partition->scope(rank), budget);
    if (!plan) return Error(plan.error().code(), s.options.name + ": " + plan.error().message());
  }
  auto kv_type = parse_kv_type(assignment.kv_type);
  if (!kv_type) return kv_type.error();
  if (Status fits = check_kv_type(model->config(), *kv_type); !fits)
    return Error(fits.error().code(), s.options.name + ": " + fits.error().message());
  // Each session's rank computes on a pool of its own, as in a process of
  // its own: sessions on one node run their steps at the same time, and a
  // shared pool would run their kernels one at a time. The client sizes
  // the pools (`serve --parallel K` asks each session for its share of
  // --threads), and each is capped at this machine's useful threads.
  const int threads = node_threads(s, assignment.threads);
  return std::shared_ptr<RankWorker>(
      new RankWorker(*model, std::make_shared<cpu::ThreadPool>(threads), *partition, rank, assignment.model_identity,
                     StageOptions{s.options.backend, budget, *kv_type, s.kv_pool, assignment.expert_ranks}),
      [model](RankWorker* worker) { delete worker; });
}

Status check_faults_allowed(const NodeState& s, const NodeAssignment& assignment) {
  if (assignment.faults.empty() || s.options.allow_faults) return {};
  return Error(ErrorCode::contract, s.options.name + " does not take fault plans (start it with --allow-faults)");
}

Status check_context(const NodeState& s, const NodeAssignment& assignment) {
  if (s.options.max_context == 0 || assignment.context <= s.options.max_context) return {};
  return Error(ErrorCode::contract, s.options.name + " holds at most " + std::to_string(s.options.max_context) +
                                        " positions a session (its --ctx-size); the session asks for " +
                                        std::to_string(assignment.context));
}

// Why the node turns `assignment` down before reading any model, or none.
NodeRefusal check_assignment(const NodeState& s, const NodeAssignment& assignment) {
  if (Status ok = check_faults_allowed(s, assignment); !ok) {
    return refusal(NodeRefusalCode::faults_not_allowed, ok.error());
  }
  if (Status ok = check_rank_in_partition(assignment); !ok) {
    return refusal(NodeRefusalCode::invalid_assignment, ok.error());
  }
  if (Status ok =
          check_fault_plan(assignment.faults, static_cast<int>(assignment.unit_counts.size()), assignment.expert_ranks);
      !ok) {
    return refusal(NodeRefusalCode::invalid_assignment, ok.error());
  }
  if (Status ok = check_context(s, assignment); !ok) return refusal(NodeRefusalCode::invalid_assignment, ok.error());
  return {};
}

// Reads the rank's shard and starts the rank; an error is the model's.
Result<RankActor> start_rank(NodePointer self, const NodeAssignment& assignment, const CoordinatorActor& coordinator) {
  const NodeState& s = self->state;
  auto model = shard_model(self, assignment);
  if (!model) return model.error();
  if (Status ok = check_shard(s, **model, assignment); !ok) {
    self->state.kept.reset();  // not the session's: not kept (a session that runs it keeps it)
    return ok.error();
  }
  auto worker = make_worker(s, std::move(*model), assignment);
  if (!worker) return worker.error();
  RankOptions options;
  options.faults = assignment.faults;
  options.phase_timeout = std::chrono::milliseconds(assignment.phase_timeout_ms);
  options.confinement = NodeConfinement{s.options.prompt_cache_dir, s.options.allow_faults};
  return spawn_rank(self->system(), std::move(*worker), assignment.session,
                    static_cast<RankId>(assignment.unit_counts.size()), coordinator, options);
}

// Takes `assignment` into a free slot, or into its session's own (a reset
// replaces the rank), or says why not.
AssignReply take_assignment(NodePointer self, const NodeAssignment& assignment, CoordinatorActor coordinator) {
  auto& s = self->state;
  if (Status free = check_slot(s, assignment, coordinator); !free) {
    spdlog::warn("{}: refused rank {}: {}", s.options.name, assignment.rank, free.error().message());
    return {refusal(NodeRefusalCode::rank_taken, free.error()), RankActor{}};
  }
  release_session(self, assignment.session);
  if (NodeRefusal refused = check_assignment(s, assignment); refused.refused()) {
    spdlog::warn("{}: refused rank {}: {}", s.options.name, assignment.rank, printable(refused.message));
    return {std::move(refused), RankActor{}};
  }
  auto rank = start_rank(self, assignment, coordinator);
  if (!rank) {
    // The error may quote what the coordinator sent (a model path).
    spdlog::warn("{}: refused rank {}: {}", s.options.name, assignment.rank, printable(rank.error().message()));
    return {refusal(NodeRefusalCode::model_refused, rank.error()), RankActor{}};
  }
  self->monitor(coordinator);
  SessionSlot& slot = s.sessions[assignment.session];
  slot = SessionSlot{*rank, std::move(coordinator), {}};
  connect_to_later_ranks(self, assignment, slot);
  spdlog::info("{}: runs rank {} of {} of session {:x} ({} of {} slots taken)", s.options.name, assignment.rank,
               assignment.unit_counts.size(), assignment.session, s.sessions.size(), s.options.slots);
  return {NodeRefusal{}, slot.rank};
}

// --- node: the node's own work, on its own thread --------------------------
// Detached: loading a model and hashing its weights block for as long as
// the disk takes, which must not stall a scheduler thread and with it the
// ranks' own actors. Only its front talks to it (see front_actor).
NodeActor::behavior_type node_actor(NodePointer self, NodeOptions options) {
  self->state.options = std::move(options);
  self->state.kv_pool = std::make_shared<KvPool>(self->state.options.kv_budget_bytes);
  // A coordinator that is gone (its client exited, its connection broke)
  // takes its session's slot with it.
  self->set_down_handler([=](caf::down_msg& down) {
    auto& s = self->state;
    std::vector<SessionId> gone;
    for (const auto& [session, slot] : s.sessions) {
      if (slot.coordinator.address() == down.source) gone.push_back(session);
    }
    for (SessionId session : gone) {
      spdlog::info("{}: the coordinator of session {:x} is gone ({}); rank released", s.options.name, session,
                   self->system().render(down.reason));
      release_session(self, session);
    }
  });
  self->set_exit_handler([=](caf::exit_msg& exit) {
    release_all(self);
    self->quit(exit.reason);
  });
  return {
      [=](name_atom, std::string& name) { self->state.options.name = std::move(name); },
      [=](assign_atom, const NodeAssignment& assignment, CoordinatorActor coordinator) -> AssignReply {
        return take_assignment(self, assignment, std::move(coordinator));
      },
      // A coordinator that gave up waiting for this node's answer to an
      // assignment says so, after the assignment on the same connection:
      // its session may go on with a spare, and its coordinator with it, so
      // no down message would ever free the rank. Only that session's slot
      // is freed.
      [=](release_atom, std::uint64_t session) {
        auto& s = self->state;
        if (!s.sessions.contains(session)) return;
        spdlog::info("{}: session {:x} gave up on this node; rank released", s.options.name, session);
        release_session(self, session);
      },
      [=](shard_atom, const NodeAssignment& assignment) -> ShardReply {
        auto shard = shard_model(self, assignment);
        if (!shard) return {refusal(NodeRefusalCode::model_refused, shard.error()), {}};
        return {NodeRefusal{}, (*shard)->tensor_digests()};
      },
  };
}

// --- front: what other nodes see ----------------------------------------------
// A scheduled actor that hands every request to the detached node actor and
// answers itself, so no other node ever holds a proxy of a detached actor.
// CAF 0.17.6's BASP broker monitors every local actor a remote node has a
// proxy of; the down message of its exit holds the actor, and it can reach
// the broker after the middleman stopped it (local_actor::cleanup unregisters
// an actor, which lets ~actor_system go on, before it sends its down
// messages), where nothing drains it (abstract_broker::cleanup skips the
// mailbox). A detached actor held so is never destroyed, and ~actor_system
// waits for its thread forever; a scheduled one held so is only
// memory the process gives back as it exits.
NodeActor::behavior_type front_actor(NodeActor::pointer self, NodeActor node) {
  // However the front ends, the node actor is told to stop, so it releases
  // its rank. A link does not do it: the front drops its behavior, and with
  // it its handle on the node actor, before its links fire; the node actor
  // then got no exit message and either ended as unreachable, without
  // running its exit handler, or kept its rank running.
  self->attach_functor([node] { caf::anon_send_exit(node, caf::exit_reason::user_shutdown); });
  // A node actor that ends takes the front with it: the node is down.
  self->monitor(node);
  self->set_down_handler([=](caf::down_msg& down) { self->quit(down.reason); });
  return {
      [=](name_atom name, std::string& text) { self->send(node, name, std::move(text)); },
      [=](release_atom release, std::uint64_t session) { self->send(node, release, session); },
      [=](assign_atom assign, NodeAssignment& assignment,
          CoordinatorActor& coordinator) -> caf::typed_response_promise<NodeRefusal, RankActor> {
        auto reply = self->make_response_promise<NodeRefusal, RankActor>();
        auto answer = [=](NodeRefusal& refusal, RankActor& rank) mutable {
          reply.deliver(std::move(refusal), std::move(rank));
        };
        auto fail = [=](caf::error& error) mutable { reply.deliver(std::move(error)); };
        self->request(node, caf::infinite, assign, std::move(assignment), std::move(coordinator)).then(answer, fail);
        return reply;
      },
      [=](shard_atom shard,
          NodeAssignment& assignment) -> caf::typed_response_promise<NodeRefusal, std::vector<std::string>> {
        auto reply = self->make_response_promise<NodeRefusal, std::vector<std::string>>();
        auto answer = [=](NodeRefusal& refusal, std::vector<std::string>& digests) mutable {
          reply.deliver(std::move(refusal), std::move(digests));
        };
        auto fail = [=](caf::error& error) mutable { reply.deliver(std::move(error)); };
        self->request(node, caf::infinite, shard, std::move(assignment)).then(answer, fail);
        return reply;
      },
  };
}

}  // namespace

NodeActor spawn_node(caf::actor_system& system, NodeOptions options) {
  return system.spawn(front_actor, system.spawn<caf::detached>(node_actor, std::move(options)));
}

}  // namespace accord
