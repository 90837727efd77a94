// The plan of a transaction: which phases an operation runs, in order, with
// their arguments, grouped into rounds of agreement (docs/protocol.md,
// "Phase sequences"). CAF-free: the coordinator actor runs it over
// CoordinatorAgreement, and tests and the fault matrix walk it.
//
// A round is one phase that carries work or arguments, followed by the
// phases that ride with it: those whose local part on every rank is
// immediate and depends on nothing but the rank's own earlier phases
// (OutputObservation, OutputPublication, MechanismCompletion, Commit).
// Every phase of a round is still run, reported and decided on every rank
// in order (DESIGN.md: phases without work of their own may ride in one
// message with their neighbour); a round only saves the round trip between
// them: a rank runs the riders right after the phase and sends their
// statuses without waiting for the decisions in between.
#pragma once

#include <vector>

#include "messages/phase_arguments.hpp"
#include "messages/protocol.hpp"
#include "messages/session_api.hpp"

namespace accord {

struct PlannedRound {
  PhaseId phase;
  PhaseArguments arguments;
  std::vector<Rider> riders;  // in order
};

// The rounds of the transaction `request` asks for on `ranks` ranks.
std::vector<PlannedRound> plan_transaction(const TransactionRequest& request, RankId ranks);

// Every phase of the transaction, riders included, in order.
std::vector<PhaseId> phases_of(const TransactionRequest& request, RankId ranks);

// The arguments of a prompt-cache transaction's phases.
PromptCacheArguments cache_arguments(const TransactionRequest& request);

}  // namespace accord
