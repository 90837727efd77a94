#include "runtime/agreement/transaction_plan.hpp"

#include "runtime/base/assert.hpp"

namespace accord {

namespace {

using enum DistributedExecutionPhase;

struct PlannedPhase {
  PhaseId id;
  PhaseArguments arguments;
};

// Whether `phase` may ride with the phase before it (docs/protocol.md,
// "Rounds"): its local part on every rank needs nothing from the others
// but data they send it (activations, the sampled token, the capture),
// which the rank waits for, and no argument the coordinator learns only
// from an earlier phase's statuses. Every phase of a forward step
// after its checkpoint rides, as do MechanismCompletion and Commit. A
// prompt cache's phases do not: a shard is published only once every rank
// prepared its own, and a load's preparation names rank 0's save, which
// the preflight's statuses tell.
bool rides(const PlannedPhase& phase) {
  switch (phase.id.phase) {
    case BoundarySourceCompletion:
    case BoundarySourceReady:
    case Execution:
    case OutputObservation:
    case PredictionTargetCapture:
    case PredictionTargetCapturePublication:
    case PredictionTargetStatePreparation:
    case PredictionExtensionExecution:
    case OutputPublication:
    case SamplingSynchronization:
    case MechanismCompletion:
    case Commit:
      return true;
    default:
      return false;
  }
}

// The phases of each operation, in order (docs/protocol.md).
std::vector<PlannedPhase> phases_for(const TransactionRequest& request, RankId ranks) {
  ACCORD_ASSERT(ranks > 0, "a transaction is planned for at least one rank");
  std::vector<PlannedPhase> plan;
  switch (request.kind) {
    case TransactionKind::end_chain:
      return plan;  // no phase of its own (TransactionDriver)
    case TransactionKind::forward_step:
      plan.push_back({phase_id(StateCheckpoint), StepTokens{request.tokens}});
      for (RankId r = 0; r + 1 < ranks; ++r) {
        plan.push_back({boundary_phase_id(BoundarySourceCompletion, r, r + 1), {}});
        plan.push_back({boundary_phase_id(BoundarySourceReady, r, r + 1), {}});
      }
      plan.push_back({phase_id(Execution), ExecutionArguments{request.all_rows || request.draft_tokens > 0}});
      plan.push_back({phase_id(OutputObservation), {}});
      if (request.capture_prediction_target) {
        const DraftTokens draft{request.draft_tokens};
        plan.push_back({phase_id(PredictionTargetCapture), draft});
        plan.push_back({phase_id(PredictionTargetCapturePublication), {}});
        plan.push_back({phase_id(PredictionTargetStatePreparation), draft});
        plan.push_back({phase_id(PredictionExtensionExecution), {}});
      }
      plan.push_back({phase_id(OutputPublication), PublicationArguments{request.return_logits}});
      if (request.sample) plan.push_back({phase_id(SamplingSynchronization), request.sampling});
      break;
    case TransactionKind::checkpoint:
      plan.push_back({phase_id(SessionCheckpoint), {}});
      break;
    case TransactionKind::rollback:
      plan.push_back({phase_id(SessionRollbackPreparation),
                      RollbackTarget{request.position, request.state_epoch, request.reset_epoch}});
      break;
    case TransactionKind::reset:
      plan.push_back({phase_id(SessionResetPreparation), {}});
      break;
    case TransactionKind::prompt_cache_save: {
      const PromptCacheArguments arguments = cache_arguments(request);
      plan.push_back({phase_id(PromptCacheSavePreflight), arguments});
      plan.push_back({phase_id(PromptCacheSavePreparation), arguments});
      plan.push_back({phase_id(PromptCacheSavePublication), {}});
      break;
    }
    case TransactionKind::prompt_cache_load:
      plan.push_back({phase_id(PromptCacheLoadPreflight), cache_arguments(request)});
      // Its arguments name rank 0's save, known once the preflight is agreed.
      plan.push_back({phase_id(PromptCacheLoadPreparation), {}});
      break;
  }
  plan.push_back({phase_id(MechanismCompletion), {}});
  plan.push_back({phase_id(Commit), {}});
  return plan;
}

}  // namespace

PromptCacheArguments cache_arguments(const TransactionRequest& request) {
  return {request.cache_root,     request.cache_name, request.cache_namespace,
          request.prepared_input, request.save_id,    {request.tokens.begin(), request.tokens.end()}};
}

std::optional<TransactionRequest> chained_step(const TransactionRequest& request, const TransactionReply& reply) {
  const SamplingResult& sampled = reply.sampled;
  if (!request.chain_next || reply.outcome != TransactionOutcome::committed || sampled.epoch != reply.epoch ||
      sampled.stop) {
    return std::nullopt;
  }
  TransactionRequest next = request;
  next.tokens = {sampled.token};
  next.sampling.rng_state = sampled.rng_state;
  return next;
}

bool asks_for_chained_step(const TransactionRequest& request, const TransactionRequest& chained) {
  TransactionRequest asked = request;
  asked.chain_next = chained.chain_next;
  return asked == chained;
}

std::vector<PlannedRound> plan_transaction(const TransactionRequest& request, RankId ranks) {
  std::vector<PlannedRound> rounds;
  for (auto& phase : phases_for(request, ranks)) {
    ACCORD_ASSERT(!rounds.empty() || !rides(phase), "a transaction's first phase begins a round: it rides with none");
    if (!rounds.empty() && rides(phase)) {
      rounds.back().riders.push_back({phase.id, std::move(phase.arguments)});
    } else {
      rounds.push_back({phase.id, std::move(phase.arguments), {}});
    }
  }
  ACCORD_ASSERT(rounds.empty() || (rounds.back().riders.empty() ? rounds.back().phase
                                                                 : rounds.back().riders.back().phase) ==
                                      phase_id(Commit),
                "a planned transaction ends with its Commit phase");
  return rounds;
}

std::vector<PhaseId> phases_of(const TransactionRequest& request, RankId ranks) {
  std::vector<PhaseId> phases;
  for (const auto& phase : phases_for(request, ranks)) phases.push_back(phase.id);
  return phases;
}

}  // namespace accord
