// One rank of a distributed session as one CAF actor (docs/protocol.md,
// "Actors"). The rank actor owns the rank's RankParticipant
// (runtime/engine/rank_participant.hpp): its agreement machine, worker, prompt
// cache and fault plan, the same ones the direct engine runs. It hands the
// participant every message in turn and sends what it sends: statuses and
// acknowledgements to the coordinator, activations, samples and captures
// to the other ranks. Nothing else touches the rank's state.
//
// It runs on CAF's scheduler, and its local work runs inside its message
// handlers: a compute phase holds one scheduler thread for its duration.
// A pipeline with one sequence computes on one rank at a time, so the
// other threads keep the protocol moving; and a message between actors on
// the scheduler goes into the sending thread's own queue, where a detached
// actor's would wake a thread for every phase of every rank (measured in
// docs/perf-log.md, "One engine (second pass)").
#pragma once

#include <caf/actor_system.hpp>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "actors/interfaces.hpp"
#include "messages/protocol.hpp"
#include "runtime/fault/fault_plan.hpp"
#include "runtime/rank/observer.hpp"
#include "runtime/rank/rank_worker.hpp"

namespace accord {

// What a node (`accord node`) decides for the ranks it runs, not their
// coordinator: where their prompt caches live, and whether they take fault
// plans.
struct NodeConfinement {
  std::optional<std::filesystem::path> prompt_cache_folder;  // none: no prompt cache
  bool allow_faults = false;
};

struct RankOptions {
  std::vector<Fault> faults;  // the session's plan; the rank keeps its own entries
  std::chrono::milliseconds phase_timeout{5000};
  std::optional<NodeConfinement> confinement;  // a node's rank; in process none
  // Where the rank computes and its weights budget (rank_stage.hpp), which
  // whoever makes the rank's worker gives it.
  StageOptions stage = {};
};

// Spawns the rank actor (RankActor, actors/interfaces.hpp) over `worker`
// (detached, on a thread of its own, when the worker computes on a device),
// rank worker->rank() of `rank_count`, its only holder. It reports to
// `coordinator` and, once told in a RankTopology every rank's actor (in
// rank order), sends its activations to the next rank and, on the output
// owner, what it samples and captures to every rank.
RankActor spawn_rank(caf::actor_system& system, std::shared_ptr<RankWorker> worker, SessionId session,
                     RankId rank_count, CoordinatorActor coordinator, const RankOptions& options);

}  // namespace accord
