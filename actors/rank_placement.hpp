// Where a distributed session's ranks live: in this process, on its model
// and one shared compute pool, or on nodes (`accord node`, actors/node.hpp)
// reached over the network. The session asks its placement wherever the
// two differ, and holds no branch on where its ranks are. Internal to
// actors/: includes CAF.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/actor_config.hpp"
#include "actors/distributed_session.hpp"
#include "actors/interfaces.hpp"
#include "actors/node_address.hpp"
#include "actors/rank_actors.hpp"
#include "runtime/rank/partition.hpp"

namespace accord {

// What a rank is made of, to start one again after it exited.
struct RankLayout {
  Partition partition;
  int threads = 1;
  std::string identity;
  std::vector<std::string> tensor_digests;  // the model's, in canonical order (identity.hpp)
  RankOptions options;
};

// A session's actor system and actors, and what starting a rank takes:
// what the session and its placement share.
struct SessionActors {
  std::unique_ptr<SessionConfig> own_config;
  std::unique_ptr<caf::actor_system> own_system;
  caf::actor_system* system = nullptr;
  const Model* model = nullptr;
  SessionId session_id = 0;
  std::vector<RankActor> ranks;  // every rank's actor, in rank order (a remote one's proxy)
  CoordinatorActor coordinator;
  // The caller's side of every transaction, made once: creating a scoped
  // actor per call costs a registration and a teardown each time.
  std::optional<caf::scoped_actor> caller;
  std::optional<RankLayout> layout;
};

class RankPlacement {
 public:
  virtual ~RankPlacement() = default;

  // How many ranks the session has: `requested` in process, one per node.
  virtual int rank_count(int requested) const = 0;
  // What this process checks before anything starts. In-process ranks
  // share this process's one copy of the model, so their weight budgets
  // and backend are checked here; a node checks its own.
  virtual Status check_here(const Model& model, const Partition& partition,
                            const DistributedOptions& options) const = 0;
  // Makes what the ranks share before the first starts.
  virtual void prepare(const DistributedOptions& options) = 0;
  // The layout's identity, where the caller's model left it empty (it
  // holds no weights), or why there can be none.
  virtual Status complete_identity(SessionActors& session) = 0;
  // Starts rank r's actors into session.ranks[r].
  virtual Status start_rank(SessionActors& session, int r, const RankOptions& options) = 0;
  // Which ranks are gone.
  virtual std::vector<bool> exited_ranks(const SessionActors& session) const = 0;
  // Waits, before rank r starts again, until its exited actors let go of
  // what they held.
  virtual void await_exit(SessionActors& session, int r) = 0;
  // Stops every rank as the session ends; those the session must wait for
  // go to `awaited`.
  virtual void stop_ranks(caf::scoped_actor& self, const std::vector<RankActor>& ranks,
                          std::vector<caf::actor>& awaited) const = 0;
  // Whether a step's observer can reach the ranks: it stays in this process.
  virtual bool takes_observers() const = 0;
  // Whether the ranks keep their snapshots on this process's shelf
  // (runtime/rank/snapshot_shelf.hpp), where the caller's handle releases them.
  virtual bool shares_snapshot_shelf() const = 0;
  // Whether every rank's prompt-cache folder is on this process's file
  // system, so this process can heal a cache a killed save left mixed.
  virtual bool shares_file_system() const = 0;
  // Whether the ranks' compute time is this process's to count in stats().
  virtual bool counts_compute() const = 0;
};

// Every rank in this process.
std::unique_ptr<RankPlacement> place_in_process();
// Rank r on peers[r], with options.spares and options.secret_file; fails
// when there is no node, a node is named twice or the secret cannot be read.
Result<std::unique_ptr<RankPlacement>> place_on_nodes(const std::vector<NodeAddress>& peers,
                                                      const DistributedOptions& options);

}  // namespace accord
