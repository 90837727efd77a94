#include "actors/message_registry.hpp"

#include <caf/actor_system_config.hpp>

#include "actors/interfaces.hpp"
#include "messages/fault.hpp"
#include "messages/node_api.hpp"
#include "messages/protocol.hpp"
#include "messages/session_api.hpp"

namespace accord {

void register_message_types(caf::actor_system_config& config) {
  // The names are part of the wire format: renaming one breaks every node
  // that still uses the old name.
  config.add_message_type<PhaseBegin>("accord.PhaseBegin");
  config.add_message_type<PhaseStatus>("accord.PhaseStatus");
  config.add_message_type<PhaseDecision>("accord.PhaseDecision");
  config.add_message_type<AbortAcknowledgement>("accord.AbortAcknowledgement");
  config.add_message_type<RankInstructions>("accord.RankInstructions");
  config.add_message_type<RankReports>("accord.RankReports");
  config.add_message_type<WireTensor>("accord.WireTensor");
  config.add_message_type<RouteTransfer>("accord.RouteTransfer");
  config.add_message_type<ExpertTransfer>("accord.ExpertTransfer");
  config.add_message_type<StepOutput>("accord.StepOutput");
  config.add_message_type<SamplingResult>("accord.SamplingResult");
  config.add_message_type<PredictionTargetHidden>("accord.PredictionTargetHidden");
  config.add_message_type<RankCheckpointReport>("accord.RankCheckpointReport");
  config.add_message_type<std::vector<RankCheckpointReport>>("accord.RankCheckpointReports");
  config.add_message_type<PromptCacheReport>("accord.PromptCacheReport");
  config.add_message_type<RankStateReport>("accord.RankStateReport");
  config.add_message_type<std::vector<RankStateReport>>("accord.RankStateReports");
  config.add_message_type<TransactionRequest>("accord.TransactionRequest");
  config.add_message_type<TransactionReply>("accord.TransactionReply");
  config.add_message_type<std::vector<std::uint64_t>>("accord.Counters");
  config.add_message_type<NodeAssignment>("accord.NodeAssignment");
  config.add_message_type<NodeRefusal>("accord.NodeRefusal");
  config.add_message_type<RankActor>("accord.RankActor");
  config.add_message_type<CoordinatorActor>("accord.CoordinatorActor");
  config.add_message_type<RankTopology>("accord.RankTopology");
  config.add_message_type<Fault>("accord.Fault");
  config.add_message_type<std::vector<Fault>>("accord.FaultPlan");
}

}  // namespace accord
