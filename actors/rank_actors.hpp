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
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "actors/atoms.hpp"
#include "messages/protocol.hpp"
#include "runtime/fault/fault_plan.hpp"
#include "runtime/session/rank_worker.hpp"

namespace accord {

// The interfaces of a rank's helper actors, which only its agreement actor
// speaks to: every request names what it answers.
using ExecutionActor = caf::typed_actor<caf::replies_to<run_units_atom, std::uint8_t>::with<LocalStatus>,
                                        caf::replies_to<observe_atom>::with<LocalStatus>>;

using StateActor = caf::typed_actor<
    caf::replies_to<begin_step_atom, Epoch, std::vector<int>>::with<LocalStatus>,
    caf::replies_to<accept_atom, WireTensor>::with<LocalStatus>,
    caf::replies_to<apply_prediction_atom>::with<LocalStatus>,
    caf::replies_to<rank_state_atom>::with<RankStateReport>,
    caf::replies_to<checkpoint_atom>::with<RankCheckpointReport>,
    caf::replies_to<rollback_atom, Epoch, RollbackTarget>::with<LocalStatus>,
    caf::replies_to<reset_atom, Epoch>::with<LocalStatus>,
    caf::replies_to<check_prefix_atom, std::vector<int>>::with<LocalStatus>,
    caf::replies_to<pack_shard_atom, int>::with<std::vector<float>>,
    caf::replies_to<prepare_load_atom, Epoch, std::vector<int>, std::vector<float>>::with<LocalStatus>,
    caf::reacts_to<commit_atom, Epoch>, caf::replies_to<restore_atom, Epoch>::with<LocalStatus>,
    caf::reacts_to<forget_atom>>;

using CacheActor = caf::typed_actor<
    caf::replies_to<save_prepare_atom, Epoch, PromptCacheArguments, std::vector<float>>::with<LocalStatus>,
    caf::replies_to<publish_atom, Epoch>::with<LocalStatus>,
    caf::replies_to<load_preflight_atom, Epoch, PromptCacheArguments>::with<LocalStatus, std::string>,
    caf::replies_to<load_read_atom, Epoch, std::string>::with<LocalStatus, std::vector<float>>,
    caf::replies_to<corrupt_atom, Epoch>::with<LocalStatus>, caf::reacts_to<commit_atom, Epoch>,
    caf::replies_to<restore_atom, Epoch>::with<LocalStatus>, caf::reacts_to<forget_atom>>;

struct RankActors {
  caf::actor agreement;
  ExecutionActor execution;
  StateActor state;
  CacheActor cache;
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
