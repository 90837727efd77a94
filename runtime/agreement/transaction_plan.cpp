#include "runtime/agreement/transaction_plan.hpp"

#include <tuple>
#include <variant>

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
    case Commit: return true;
    default: return false;
  }
}

// Each stage's expert routes (docs/protocol.md, "Expert routes"): their
// completions, then their returns' readiness.
void plan_expert_routes(RankId stage, SessionRanks ranks, std::vector<PlannedPhase>& plan) {
  const std::vector<RankId> helpers = expert_helpers(stage, ranks.ranks, ranks.expert_ranks);
  for (RankId helper : helpers) {
    plan.push_back({boundary_phase_id(BoundarySourceCompletion, stage, helper, RouteKind::experts), {}});
  }
  for (RankId helper : helpers) {
    plan.push_back({boundary_phase_id(BoundarySourceReady, helper, stage, RouteKind::experts), {}});
  }
}

void plan_forward_step(const ForwardStepRequest& step, SessionRanks ranks, std::vector<PlannedPhase>& plan) {
  plan.push_back({phase_id(StateCheckpoint), StepTokens{step.tokens}});
  for (RankId r = 0; r < ranks.ranks; ++r) {
    plan_expert_routes(r, ranks, plan);
    if (r + 1 == ranks.ranks) break;
    plan.push_back({boundary_phase_id(BoundarySourceCompletion, r, r + 1), {}});
    plan.push_back({boundary_phase_id(BoundarySourceReady, r, r + 1), {}});
  }
  // A draft is verified against every row's logits.
  const bool all_rows = step.all_rows || (step.prediction_target && step.prediction_target->count > 0);
  plan.push_back({phase_id(Execution), ExecutionArguments{all_rows}});
  plan.push_back({phase_id(OutputObservation), {}});
  if (step.prediction_target) {
    const DraftTokens draft = *step.prediction_target;
    plan.push_back({phase_id(PredictionTargetCapture), draft});
    plan.push_back({phase_id(PredictionTargetCapturePublication), {}});
    plan.push_back({phase_id(PredictionTargetStatePreparation), draft});
    plan.push_back({phase_id(PredictionExtensionExecution), {}});
  }
  plan.push_back({phase_id(OutputPublication), PublicationArguments{step.return_logits}});
  if (step.sampling) plan.push_back({phase_id(SamplingSynchronization), *step.sampling});
}

// The phases of each operation, in order (docs/protocol.md).
std::vector<PlannedPhase> phases_for(const TransactionRequest& request, SessionRanks ranks) {
  ACCORD_ASSERT(ranks.ranks > 0, "a transaction is planned for at least one rank");
  std::vector<PlannedPhase> plan;
  const auto& operation = request.operation;
  switch (request.kind()) {
    case TransactionKind::end_chain: return plan;  // no phase of its own (TransactionDriver)
    case TransactionKind::forward_step: plan_forward_step(std::get<ForwardStepRequest>(operation), ranks, plan); break;
    case TransactionKind::checkpoint: plan.push_back({phase_id(SessionCheckpoint), {}}); break;
    case TransactionKind::rollback: {
      const auto& rollback = std::get<RollbackRequest>(operation);
      plan.push_back({phase_id(SessionRollbackPreparation),
                      RollbackTarget{rollback.position, rollback.state_epoch, rollback.reset_epoch}});
      break;
    }
    case TransactionKind::reset: plan.push_back({phase_id(SessionResetPreparation), {}}); break;
    case TransactionKind::snapshot:
      plan.push_back({phase_id(SessionCheckpoint), SnapshotTarget{std::get<SnapshotRequest>(operation).id}});
      break;
    case TransactionKind::snapshot_restore:
      plan.push_back(
          {phase_id(SessionRollbackPreparation), SnapshotTarget{std::get<SnapshotRestoreRequest>(operation).id}});
      break;
    case TransactionKind::prompt_cache_save: {
      const PromptCacheArguments& arguments = std::get<PromptCacheSaveRequest>(operation).arguments;
      plan.push_back({phase_id(PromptCacheSavePreflight), arguments});
      plan.push_back({phase_id(PromptCacheSavePreparation), arguments});
      plan.push_back({phase_id(PromptCacheSavePublication), {}});
      break;
    }
    case TransactionKind::prompt_cache_load:
      plan.push_back({phase_id(PromptCacheLoadPreflight), std::get<PromptCacheLoadRequest>(operation).arguments});
      // Its arguments name rank 0's save, known once the preflight is agreed.
      plan.push_back({phase_id(PromptCacheLoadPreparation), {}});
      break;
  }
  plan.push_back({phase_id(MechanismCompletion), {}});
  plan.push_back({phase_id(Commit), {}});
  return plan;
}

}  // namespace

std::optional<TransactionRequest> chained_step(const TransactionRequest& request, const TransactionReply& reply) {
  const auto* step = std::get_if<ForwardStepRequest>(&request.operation);
  const SamplingResult& sampled = reply.sampled;
  if (step == nullptr || !step->chain_next || !step->sampling || reply.outcome != TransactionOutcome::committed ||
      sampled.epoch != reply.epoch || sampled.stop) {
    return std::nullopt;
  }
  ForwardStepRequest next = *step;
  next.tokens = {sampled.token};
  next.sampling->rng_state = sampled.rng_state;
  return TransactionRequest{std::move(next)};
}

bool asks_for_chained_step(const TransactionRequest& request, const TransactionRequest& chained) {
  const auto* asked = std::get_if<ForwardStepRequest>(&request.operation);
  const auto* begun = std::get_if<ForwardStepRequest>(&chained.operation);
  if (asked == nullptr || begun == nullptr) return false;
  // Every field but chain_next.
  auto step = [](const ForwardStepRequest& s) {
    return std::tie(s.tokens, s.all_rows, s.sampling, s.prediction_target, s.return_logits);
  };
  return step(*asked) == step(*begun);
}

std::vector<PlannedRound> plan_transaction(const TransactionRequest& request, SessionRanks ranks) {
  std::vector<PlannedRound> rounds;
  for (auto& phase : phases_for(request, ranks)) {
    ACCORD_ASSERT(!rounds.empty() || !rides(phase), "a transaction's first phase begins a round: it rides with none");
    if (!rounds.empty() && rides(phase)) {
      rounds.back().riders.push_back({phase.id, std::move(phase.arguments)});
    } else {
      rounds.push_back({phase.id, std::move(phase.arguments), {}});
    }
  }
  ACCORD_ASSERT(
      rounds.empty() ||
          (rounds.back().riders.empty() ? rounds.back().phase : rounds.back().riders.back().phase) == phase_id(Commit),
      "a planned transaction ends with its Commit phase");
  return rounds;
}

std::vector<PhaseId> phases_of(const TransactionRequest& request, SessionRanks ranks) {
  std::vector<PhaseId> phases;
  for (const auto& phase : phases_for(request, ranks)) phases.push_back(phase.id);
  return phases;
}

}  // namespace accord
