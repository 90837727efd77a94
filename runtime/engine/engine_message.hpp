// Every message between the TransactionDriver and the ranks' RankParticipants, in
// one flat variant, and how one reaches its receiver: the transports that
// run the engine in one thread (the direct engine, the simulator in sim/)
// queue these and hand them over here. (A flat variant: a variant of
// variants trips GCC 12's -Wmaybe-uninitialized under the sanitizers.)
#pragma once

#include <type_traits>
#include <utility>
#include <variant>

#include "runtime/engine/rank_participant.hpp"
#include "runtime/engine/transaction_driver.hpp"

namespace accord {

using EngineMessage =
    std::variant<PhaseBegin, PhaseDecision, RouteTransfer, ExpertTransfer, SamplingResult, PredictionTargetHidden,
                 PhaseStatus, AbortAcknowledgement, StepOutput, RankCheckpointReport, PromptCacheReport>;

// What one of a variant's alternatives holds, as an EngineMessage.
template <class Variant>
EngineMessage engine_message(Variant message) {
  return std::visit([](auto& m) { return EngineMessage(std::move(m)); }, message);
}

// Hands `message` to the driver when `to` is kNoRank, else to node(to).
// What the receiver never takes (a status sent to a rank) is dropped.
template <class NodeOf>
void deliver(TransactionDriver& driver, RankId to, EngineMessage& message, NodeOf&& node) {
  std::visit(
      [&](auto& m) {
        using T = std::decay_t<decltype(m)>;
        constexpr bool from_driver = std::is_same_v<T, PhaseBegin> || std::is_same_v<T, PhaseDecision>;
        constexpr bool status = std::is_same_v<T, PhaseStatus> || std::is_same_v<T, AbortAcknowledgement>;
        if (to == kNoRank) {
          if constexpr (status) {
            driver.step(m);
          } else if constexpr (!from_driver && !std::is_same_v<T, RouteTransfer> &&
                               !std::is_same_v<T, ExpertTransfer>) {
            driver.collect(std::move(m));
          }
        } else if constexpr (from_driver) {
          node(to).receive(m);
        } else if constexpr (std::is_constructible_v<PeerData, T>) {
          node(to).receive(PeerData(std::move(m)));
        }
      },
      message);
}

}  // namespace accord
