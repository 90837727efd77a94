// The coordinator of a distributed session (docs/protocol.md, "Actors"):
// an event-based actor that turns each TransactionRequest into
// the operation's phase sequence, runs CoordinatorAgreement (the pure
// decision logic) over the ranks' replies, its own timer and the ranks'
// down messages, and answers with one TransactionReply. The caller blocks
// once per transaction, never per phase.
#pragma once

#include <caf/actor_system.hpp>
#include <chrono>
#include <vector>

#include "actors/interfaces.hpp"
#include "messages/protocol.hpp"
#include "messages/session_api.hpp"
#include "runtime/agreement/coordinator_agreement.hpp"
#include "runtime/engine/transaction_driver.hpp"

namespace accord {

struct CoordinatorOptions {
  std::chrono::milliseconds tick{5};
  AgreementOptions agreement;  // deadlines, in ticks

  // The clock of a phase timeout: a tick of a twentieth of it (5 ms at the
  // least), and the deadlines in those ticks. A deadline then passes within
  // a tick of the timeout, while an agreement in progress wakes a thread
  // about 20 times per timeout: a tick preempts the rank that computes, and
  // ticks every 5 ms cost a 110M decode step about 5%.
  static CoordinatorOptions for_phase_timeout(std::chrono::milliseconds timeout);
};

// Spawns the coordinator (CoordinatorActor, actors/interfaces.hpp) of
// `ranks` (and how each routed block's experts spread over them). Send it a RankTopology with the ranks' actors (in
// rank order) before any request. Asked with down_atom, it answers the ranks it saw go down.
CoordinatorActor spawn_coordinator(caf::actor_system& system, SessionId session, SessionRanks ranks,
                                   CoordinatorOptions options);

}  // namespace accord
