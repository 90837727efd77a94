// The plan of a transaction: which phases an operation runs, in order, with
// their arguments, grouped into rounds of agreement (docs/protocol.md,
// "Phase sequences"). CAF-free: the coordinator actor runs it over
// CoordinatorAgreement, and tests and the fault matrix walk it.
//
// A round is one phase followed by the phases that ride with it, with their
// arguments: those whose local part on every rank needs nothing from the
// other ranks but the data they send it, and no argument known only from
// an earlier phase's statuses. A forward step is one round (its checkpoint,
// then every other phase); a prompt cache's phases take a round each.
// Every phase of a round is still run, reported and decided on every rank
// in order; a round only saves the round trips between them: a rank runs
// each rider as soon as its data is here and sends its status without
// waiting for the decisions in between (docs/protocol.md, "Rounds", and
// where that goes beyond DESIGN.md's wording).
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
