// One rank of a distributed session as CAF actors (DESIGN.md, "Ranks as
// actors"):
// - agreement: the rank's voice in every phase. It feeds RankAgreement (the
//   pure rank-side state machine) with the coordinator's messages, runs the
//   local part of each phase through the other actors, and reports.
// - execution: a detached actor (its own thread, so compute never blocks a
//   scheduler thread) that runs the rank's units and its head on the
//   rank's pool (which in-process ranks share).
// - state: the rank's KV state: step checkpoints, checkpoints for the
//   caller, rollback and reset preparation, commit and restore; it packs
//   the prompt-cache shard of a save and installs the shard of a load.
// - cache: a detached actor doing the rank's prompt-cache shard I/O
//   (RankPromptCache): write, verify, publish, revert; read and check.
//   It never touches the RankWorker, only the shard handed to it.
// The actors share the rank's RankWorker; the agreement actor asks for one
// local action at a time, so they never touch it at once.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <chrono>
#include <memory>
#include <vector>

#include "messages/protocol.hpp"
#include "runtime/fault/fault_plan.hpp"
#include "runtime/session/rank_worker.hpp"

namespace accord {

struct RankActors {
  caf::actor agreement;
  caf::actor execution;
  caf::actor state;
  caf::actor cache;
};

struct RankOptions {
  std::vector<Fault> faults;  // the session's plan; the rank keeps its own entries
  std::chrono::milliseconds phase_timeout{5000};
  // The execution and cache actors run detached, on threads of their own,
  // so compute and disk I/O never block a scheduler thread. Only tests on
  // CAF's deterministic scheduler turn this off (tests/order_faults_test.cpp):
  // there a detached actor would run outside the test's control.
  bool detach_local_work = true;
};

// Spawns the rank's actors. The agreement actor reports to `coordinator`
// and, once told with topology_atom every rank's agreement actor (in rank
// order), sends its activations to the next rank and, on the output owner,
// what it samples to every rank.
RankActors spawn_rank(caf::actor_system& system, std::shared_ptr<RankWorker> worker, SessionId session,
                      caf::actor coordinator, const RankOptions& options);

}  // namespace accord
