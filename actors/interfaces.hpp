// The typed interfaces of a session's actors (CAF 0.17.6 typed_actor):
// every message an actor takes, and what it answers, is part of its
// handle's type, so a message it does not take is refused at compile time.
// Handles cross the wire typed too (a node's coordinator and rank, the
// topology's ranks): actors/message_registry.cpp names them.
#pragma once

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>
#include <cstdint>
#include <memory>
#include <vector>

#include "actors/atoms.hpp"
#include "messages/fault.hpp"
#include "messages/node_api.hpp"
#include "messages/protocol.hpp"
#include "messages/session_api.hpp"
#include "runtime/rank/observer.hpp"

namespace accord {

// The observer of the steps that begin from now on, lent to an in-process
// rank by message (nullptr: none). It cannot travel to another process.
struct LentObserver {
  std::shared_ptr<StepObserver> observer;
};

}  // namespace accord

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(accord::LentObserver)

namespace accord {

struct RankTopology;

// One rank (actors/rank_actors.hpp). The topology lists every rank's actor
// in rank order.
using RankActor =
    caf::typed_actor<caf::reacts_to<PhaseBegin>, caf::reacts_to<PhaseDecision>, caf::reacts_to<RankInstructions>,
                     caf::reacts_to<RouteTransfer>, caf::reacts_to<ExpertTransfer>, caf::reacts_to<SamplingResult>,
                     caf::reacts_to<PredictionTargetHidden>, caf::reacts_to<RankTopology>, caf::reacts_to<LentObserver>,
                     caf::replies_to<rank_state_atom>::with<RankStateReport>,
                     caf::replies_to<faults_atom, std::vector<Fault>>::with<bool>, caf::reacts_to<delayed_atom, Epoch>,
                     caf::replies_to<dropped_atom>::with<std::vector<std::uint64_t>>>;

// Every rank's actor, in rank order: what the coordinator and each rank
// learn of the session's ranks, and again after a rank was restarted.
struct RankTopology {
  std::vector<RankActor> ranks;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RankTopology& x) {
  return f(x.ranks);
}

// The coordinator (actors/coordinator.hpp): one TransactionRequest in, one
// TransactionReply out; what ranks send; the topology and restarted ranks;
// the counters and every rank's state; a new phase timeout (milliseconds).
using CoordinatorActor = caf::typed_actor<
    caf::replies_to<TransactionRequest>::with<TransactionReply>, caf::reacts_to<PhaseStatus>,
    caf::reacts_to<AbortAcknowledgement>, caf::reacts_to<RankReports>, caf::reacts_to<StepOutput>,
    caf::reacts_to<SamplingResult>, caf::reacts_to<PredictionTargetHidden>, caf::reacts_to<RankCheckpointReport>,
    caf::reacts_to<PromptCacheReport>, caf::reacts_to<RankTopology>, caf::reacts_to<restart_atom, RankId, RankActor>,
    caf::replies_to<dropped_atom>::with<std::vector<std::uint64_t>>,
    caf::replies_to<down_atom>::with<std::vector<RankId>>,
    caf::replies_to<rank_state_atom>::with<std::vector<RankStateReport>>, caf::reacts_to<tick_atom, std::uint64_t>,
    caf::replies_to<deadline_atom, std::int32_t>::with<bool>>;

// A node (actors/node.hpp), as other processes see it: an assignment and
// the coordinator in, (refusal, the rank's actor) out; an assignment
// without digests in, (refusal, its shard's tensor digests) out; a name for
// its logs; a session id whose rank it is to let go of. The refusal's code
// is none when the node did as asked.
using NodeActor =
    caf::typed_actor<caf::replies_to<assign_atom, NodeAssignment, CoordinatorActor>::with<NodeRefusal, RankActor>,
                     caf::replies_to<shard_atom, NodeAssignment>::with<NodeRefusal, std::vector<std::string>>,
                     caf::reacts_to<name_atom, std::string>, caf::reacts_to<release_atom, std::uint64_t>>;

}  // namespace accord
