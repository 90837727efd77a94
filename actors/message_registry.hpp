// Registers the protocol's message types (messages/) with CAF. Every node of
// a cluster must register the same set under the same names: CAF 0.17
// serializes a message's elements by registered name, and a node that lacks
// a name fails to deserialize the message with sec::unknown_type.
#pragma once

namespace caf {
class actor_system_config;
}

namespace accord {

// Adds every message type to `config` under its stable name:
// "accord.PhaseBegin", "accord.PhaseStatus", "accord.PhaseDecision",
// "accord.AbortAcknowledgement", "accord.WireTensor", "accord.RouteTransfer", "accord.ExpertTransfer",
// "accord.StepOutput", "accord.RankCheckpointReport", ...,
// "accord.NodeAssignment" (actors/message_registry.cpp). Call it before the
// actor system is built from `config`.
void register_message_types(caf::actor_system_config& config);

}  // namespace accord
