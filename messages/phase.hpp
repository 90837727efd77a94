// The phases every rank agrees on, one by one, in a distributed session
// transaction (docs/protocol.md), and the id that names one
// phase on the wire: the phase plus, for the two boundary phases, the route
// between consecutive ranks it concerns.
//
// Protocol types only: no CAF include. The inspect() overloads have the form
// CAF 0.17.6 expects, so actors/message_registry.cpp can register them.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace accord {

// A rank's index in the topology: 0 owns the embedding, the last one the head.
using RankId = std::uint32_t;
inline constexpr RankId kNoRank = std::numeric_limits<RankId>::max();

// The phase table: each phase, with what a rank's ok status for it says.
// Keep the order: the values travel on the wire.
enum class DistributedExecutionPhase : std::uint8_t {
  StateCheckpoint,                     // captured the checkpoint for rollback
  PromptCacheLoadPreflight,            // accepts the cache identity and input
  PromptCacheLoadPreparation,          // loaded and validated its shard into provisional state
  PromptCacheSavePreflight,            // accepts the save identity and input
  PromptCacheSavePreparation,          // wrote and validated an unpublished shard
  PromptCacheSavePublication,          // published its shard reversibly
  SessionCheckpoint,                   // captured an opaque checkpoint for the caller
  SessionResetPreparation,             // prepared a replacement empty state
  SessionRollbackPreparation,          // restored a checkpoint into provisional state
  BoundarySourceCompletion,            // the route's source tensor is complete
  BoundarySourceReady,                 // source done and both ends prepared
  Execution,                           // its units ran (including transfers)
  OutputObservation,                   // final-logits observation/intervention done
  PredictionTargetCapture,             // output-owner hidden capture is present
  PredictionTargetCapturePublication,  // it received the published capture
  PredictionTargetStatePreparation,    // it validated a provisional lane swap
  PredictionExtensionExecution,        // it ran the typed prediction-only operation
  OutputPublication,                   // it holds the authoritative (intervened) output
  SamplingSynchronization,             // it holds the sampled token and stop flag
  MechanismCompletion,                 // its device work is complete
  Commit,                              // the final commit decision
};

inline constexpr int kDistributedExecutionPhaseCount = 21;
static_assert(static_cast<int>(DistributedExecutionPhase::Commit) + 1 == kDistributedExecutionPhaseCount);

// CAF's stringification picks up a to_string that returns std::string.
inline std::string to_string(DistributedExecutionPhase phase) {
  using enum DistributedExecutionPhase;
  switch (phase) {
    case StateCheckpoint: return "StateCheckpoint";
    case PromptCacheLoadPreflight: return "PromptCacheLoadPreflight";
    case PromptCacheLoadPreparation: return "PromptCacheLoadPreparation";
    case PromptCacheSavePreflight: return "PromptCacheSavePreflight";
    case PromptCacheSavePreparation: return "PromptCacheSavePreparation";
    case PromptCacheSavePublication: return "PromptCacheSavePublication";
    case SessionCheckpoint: return "SessionCheckpoint";
    case SessionResetPreparation: return "SessionResetPreparation";
    case SessionRollbackPreparation: return "SessionRollbackPreparation";
    case BoundarySourceCompletion: return "BoundarySourceCompletion";
    case BoundarySourceReady: return "BoundarySourceReady";
    case Execution: return "Execution";
    case OutputObservation: return "OutputObservation";
    case PredictionTargetCapture: return "PredictionTargetCapture";
    case PredictionTargetCapturePublication: return "PredictionTargetCapturePublication";
    case PredictionTargetStatePreparation: return "PredictionTargetStatePreparation";
    case PredictionExtensionExecution: return "PredictionExtensionExecution";
    case OutputPublication: return "OutputPublication";
    case SamplingSynchronization: return "SamplingSynchronization";
    case MechanismCompletion: return "MechanismCompletion";
    case Commit: return "Commit";
  }
  // A value off the wire that names no phase.
  return "UnknownPhase(" + std::to_string(static_cast<int>(phase)) + ")";
}

// The phase a name from to_string() names; nullopt for any other text.
inline std::optional<DistributedExecutionPhase> phase_from_string(std::string_view name) {
  for (int i = 0; i < kDistributedExecutionPhaseCount; ++i) {
    const auto phase = static_cast<DistributedExecutionPhase>(i);
    if (to_string(phase) == name) return phase;
  }
  return std::nullopt;
}

// True for the two phases that concern one route between consecutive ranks.
constexpr bool is_boundary_phase(DistributedExecutionPhase phase) {
  return phase == DistributedExecutionPhase::BoundarySourceCompletion ||
         phase == DistributedExecutionPhase::BoundarySourceReady;
}

// What a route carries: a pipeline's hidden activations from a rank to the
// next, or a routed block's rows between the rank that runs the block and
// a rank that holds some of its experts (docs/protocol.md, "Expert routes").
enum class RouteKind : std::uint8_t { activations, experts };

// The route from `source` to `target` (target = source + 1 in a pipeline).
// The default value is "no route".
struct CommunicationRouteId {
  RankId source = kNoRank;
  RankId target = kNoRank;
  RouteKind kind = RouteKind::activations;

  bool is_none() const { return source == kNoRank && target == kNoRank; }
  bool operator==(const CommunicationRouteId&) const = default;
};

// "0->1", "0->2,experts".
inline std::string to_string(const CommunicationRouteId& route) {
  if (route.is_none()) return "none";
  const std::string ends = std::to_string(route.source) + "->" + std::to_string(route.target);
  return route.kind == RouteKind::experts ? ends + ",experts" : ends;
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, CommunicationRouteId& x) {
  return f(x.source, x.target, x.kind);
}

// The ranks that hold experts of the units rank `stage` runs, when each
// routed block's experts are spread over `expert_ranks` of `ranks` ranks
// (runtime/rank/expert_placement.hpp): slice j of them, for j = 1 ..
// expert_ranks - 1, lies on rank (stage + j) mod ranks; slice 0 stays with
// the stage. Each is the target of an expert route from the stage.
inline std::vector<RankId> expert_helpers(RankId stage, RankId ranks, RankId expert_ranks) {
  std::vector<RankId> helpers;
  for (RankId j = 1; j < expert_ranks && j < ranks; ++j) helpers.push_back((stage + j) % ranks);
  return helpers;
}

// One phase of a transaction as it is named on the wire. The route is only
// meaningful for the boundary phases and is "no route" for every other one.
struct PhaseId {
  DistributedExecutionPhase phase = DistributedExecutionPhase::StateCheckpoint;
  CommunicationRouteId route;

  bool operator==(const PhaseId&) const = default;
};

// A phase that concerns no route.
constexpr PhaseId phase_id(DistributedExecutionPhase phase) { return PhaseId{phase, {}}; }
// A boundary phase on the route from `source` to `target`.
constexpr PhaseId boundary_phase_id(DistributedExecutionPhase phase, RankId source, RankId target,
                                    RouteKind kind = RouteKind::activations) {
  return PhaseId{phase, {source, target, kind}};
}

// "Execution", "BoundarySourceReady(0->1)".
inline std::string to_string(const PhaseId& id) {
  if (id.route.is_none()) return to_string(id.phase);
  return to_string(id.phase) + "(" + to_string(id.route) + ")";
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PhaseId& x) {
  return f(x.phase, x.route);
}

}  // namespace accord
