// A node of a remote cluster (`accord node`): a process that runs one rank
// of a session whose coordinator lives elsewhere (docs/protocol.md, "Remote
// ranks"). Its node actor, published with CAF's middleman, waits for an
// assignment (messages/node_api.hpp), loads its shard of the model (only
// the tensors of its rank: docs/residency.md), checks their digests against
// the session's, spawns the rank's actors (actors/rank_actors.hpp) and
// answers with the rank's actor.
//
// The actor to publish is a scheduled front; the work runs in a detached
// actor behind it that never leaves the process. No other node may hold a
// detached actor: CAF 0.17.6 can strand the last reference to such an actor
// in its middleman at shutdown, and the actor system then waits for the
// actor's thread forever (node.cpp, front_actor).
//
// A node serves up to --slots sessions at once (NodeOptions::slots), each
// its own rank: its own worker, keys and values and thread pool, over one
// copy of each shard the node loaded, shared by every session that asks
// for that shard (the same file, rank scope and context; on a device,
// --backend cuda, each session's stage still copies its units' weights to
// the device: runtime/model/cuda_transformer.hpp). While a
// session's coordinator lives, its slot is that session's: an assignment
// from the same coordinator (a reset or a heal) replaces its rank; a new
// session past the slots is refused, naming the node and --slots; a
// session's rank goes when its coordinator does (the client exited or its
// connection broke) or when its coordinator releases it (release_atom),
// freeing that slot only.
//
// What touches the node's machine is the node's own setting, never the
// coordinator's: the model is its --model, or a file of its --model-dir
// named by the assignment (a plain name, never a path); prompt caches are
// names under its --prompt-cache-dir; fault plans only with
// --allow-faults. A node with --model-dir loads the model each session
// asks for; a shard no session runs is dropped when another is loaded;
// a model that fails to load, or is not the session's, is not kept. A node
// keeps the shard it loaded last while the next session asks for the same
// one.
#pragma once

#include <caf/actor_system.hpp>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "actors/interfaces.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/stage_backend.hpp"
#include "runtime/net/handshake.hpp"

namespace accord {

struct NodeOptions {
  std::string name;                 // how errors and logs name the node: "node HOST:PORT"
  std::filesystem::path model;      // --model, its header checked at start: the only model it serves
  std::filesystem::path model_dir;  // --model-dir, without --model: serves its files by name
  std::optional<std::filesystem::path> prompt_cache_dir;  // --prompt-cache-dir; none: no prompt cache
  bool allow_faults = false;                              // --allow-faults
  // --max-resident-bytes: the rank's weights budget (runtime/model/residency.hpp);
  // 0: the coordinator's, if any
  std::uint64_t max_resident_bytes = 0;
  // --slots: the most sessions it serves at once. The default, 1, keeps a
  // node's memory that of one session; each more slot costs a rank's keys
  // and values as its positions fill (paged, runtime/model/kv_cache.hpp)
  // and its compute threads, not another copy of the weights.
  int slots = 1;
  // --kv-budget-bytes: the most bytes of keys and values its sessions'
  // ranks hold together (one KV pool, runtime/model/kv_pool.hpp); a step
  // past it aborts. 0: no budget but each session's context.
  std::uint64_t kv_budget_bytes = 0;
  // --ctx-size: the most positions a session's rank may hold here (its
  // keys and values); a session asking for more is refused. 0: no limit.
  int max_context = 0;
  // --backend, --devices: where the node's rank computes.
  BackendChoice backend = {};
  // What the node proves when it connects to the other nodes of its
  // session (--secret-file: the cluster's secret); none: loopback only.
  std::optional<Secret> secret = std::nullopt;
};

// Spawns the node actor and returns its front, the actor to publish. It
// answers (assign_atom, NodeAssignment, coordinator) with (failure, rank
// actor): an empty failure and the rank's actor, or why the node refused
// and no actor; (shard_atom, NodeAssignment) with (failure, the digests of
// the rank's tensors, empty for the others), which a coordinator that
// read no weights puts together into the model's identity; (name_atom,
// name) renames it; (release_atom, session id) stops the rank it runs for
// that session and frees its slot, which a coordinator sends when it stops
// waiting for the node's answer. It logs with
// spdlog. Exiting it stops the node and every rank it runs.
NodeActor spawn_node(caf::actor_system& system, NodeOptions options);

}  // namespace accord
