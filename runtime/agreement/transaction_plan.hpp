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
// why phases with work may ride too).
#pragma once

#include <optional>
#include <vector>

#include "messages/phase_arguments.hpp"
#include "messages/protocol.hpp"
#include "messages/session_api.hpp"

namespace accord {

// The ranks a transaction runs on, and over how many of them each routed
// block's experts spread (runtime/rank/expert_placement.hpp; 1: each stage
// holds its own). Made from a rank count alone where nothing spreads.
struct SessionRanks {
  SessionRanks(RankId rank_count, RankId spread = 1) : ranks(rank_count), expert_ranks(spread) {}  // NOLINT
  RankId ranks;
  RankId expert_ranks;
};

struct PlannedRound {
  PhaseId phase;
  PhaseArguments arguments;
  std::vector<Rider> riders;  // in order
};

// The rounds of the transaction `request` asks for on `ranks` ranks.
std::vector<PlannedRound> plan_transaction(const TransactionRequest& request, SessionRanks ranks);

// Every phase of the transaction, riders included, in order.
std::vector<PhaseId> phases_of(const TransactionRequest& request, SessionRanks ranks);

// The step that the commit `reply` of `request` begins on its own
// (ForwardStepRequest::chain_next), if any: the same request on the token
// the step sampled, sampling on from where the pick left the random
// stream. None after a stop token, or where the request did not chain.
std::optional<TransactionRequest> chained_step(const TransactionRequest& request, const TransactionReply& reply);

// Whether `request` asks for `chained`, the step begun before it was asked
// for. chain_next does not count: each request says anew whether to chain.
bool asks_for_chained_step(const TransactionRequest& request, const TransactionRequest& chained);

}  // namespace accord
