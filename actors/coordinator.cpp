#include "actors/coordinator.hpp"

#include <algorithm>
#include <caf/all.hpp>
#include <memory>
#include <optional>
#include <type_traits>

#include "actors/atoms.hpp"
#include "actors/batched_send.hpp"
#include "messages/session_api.hpp"
#include "runtime/engine/transaction_driver.hpp"

namespace accord {

namespace {

struct CoordinatorState {
  std::unique_ptr<TransactionDriver> driver;
  CoordinatorOptions options;
  std::vector<RankActor> ranks;
  std::vector<std::vector<RankInstruction>> held;  // for each rank, in order (send_to_ranks)
  DriverReady ready;                               // what pump takes from the driver, its buffers kept
  // A tick is on its way. The timer runs only while a phase or an abort is
  // being agreed on, so an idle session wakes no thread. Each tick carries
  // its number: one armed before the period changed is not counted.
  bool ticking = false;
  std::uint64_t tick_number = 0;                          // of the tick on its way
  caf::actor_clock::time_point tick_due;                  // when the tick on its way is due
  caf::typed_response_promise<TransactionReply> promise;  // the open transaction's, while the driver is busy
};

using CoordinatorPointer = CoordinatorActor::stateful_pointer<CoordinatorState>;

bool is_proceed(const RankInstruction& instruction) {
  const auto* decision = std::get_if<PhaseDecision>(&instruction);
  return decision != nullptr && decision->decision == Decision::proceed;
}

// What a rank has to take goes as one message (send_batched). A
// proceed waits for the next other instruction to its rank or for the
// round's end: a rank runs a round's riders without waiting for their
// decisions, so the wait costs no time and saves a message per phase,
// while every rank still takes every decision, in order, before the
// round's end.
void send_to_ranks(CoordinatorPointer self, std::vector<CoordinatorMessage>& messages) {
  auto& held = self->state.held;
  for (auto& message : messages) held.at(message.to).push_back(std::move(message.message));
  const bool round_over = !self->state.driver->agreeing();
  for (RankId r = 0; r < held.size(); ++r) {
    auto& items = held[r];
    if (round_over || !std::all_of(items.begin(), items.end(), is_proceed)) {
      send_batched<RankInstructions>(self, self->state.ranks[r], items);
    }
  }
}

// Arms the next tick, unless one is on its way within a period (one
// armed under a longer period is replaced).
void arm_tick(CoordinatorPointer self) {
  auto& s = self->state;
  const auto due = self->clock().now() + s.options.tick;
  if (s.ticking && s.tick_due <= due) return;
  s.ticking = true;
  s.tick_due = due;
  self->delayed_send(caf::actor_cast<CoordinatorActor>(self), s.options.tick, tick_atom::value, ++s.tick_number);
}

// Sends what the driver has for the ranks and the caller; true when there
// was anything.
bool pump(CoordinatorPointer self) {
  auto& s = self->state;
  DriverReady& ready = s.ready;
  s.driver->take_ready(ready);
  const bool anything = !ready.messages.empty() || ready.reply.has_value();
  send_to_ranks(self, ready.messages);
  if (ready.reply) s.promise.deliver(std::move(*ready.reply));
  if (s.driver->agreeing()) arm_tick(self);
  return anything;
}

// Hands one report of a rank to the driver: a status or an acknowledgement
// steps the agreement; what goes beside them is collected.
template <class Report>
void take_report(CoordinatorPointer self, Report&& report) {
  using T = std::decay_t<Report>;
  if constexpr (std::is_same_v<T, PhaseStatus> || std::is_same_v<T, AbortAcknowledgement>) {
    self->state.driver->step(report);
  } else {
    self->state.driver->collect(std::forward<Report>(report));
  }
}

// A loaded machine delivers ticks late; counting the periods that really
// passed keeps the deadlines in wall time rather than in ticks received.
void on_tick(CoordinatorPointer self, std::uint64_t number) {
  auto& s = self->state;
  if (!s.ticking || number != s.tick_number) return;
  s.ticking = false;
  const auto late = self->clock().now() - s.tick_due;
  const auto periods = 1 + std::max<std::int64_t>(0, late / s.options.tick);
  // A deadline that passes starts the next one (an abort's), which runs
  // from now: the periods after it are not counted toward it.
  for (std::int64_t i = 0; i < periods; ++i) {
    s.driver->tick();
    if (pump(self)) return;
  }
}

// Every rank's state report, asked through the coordinator: its messages
// to a rank keep their order, so each rank has applied every decision the
// coordinator sent before it answers. A rank that does not answer gets a
// report with an empty digest.
void collect_rank_states(CoordinatorPointer self) {
  struct Collection {
    caf::typed_response_promise<std::vector<RankStateReport>> promise;
    std::vector<RankStateReport> reports;
    std::size_t missing = 0;
  };
  auto collection = std::make_shared<Collection>();
  collection->promise = self->make_response_promise<std::vector<RankStateReport>>();
  collection->reports.resize(self->state.ranks.size());
  collection->missing = self->state.ranks.size();
  auto answered = [collection] {
    if (--collection->missing == 0) collection->promise.deliver(std::move(collection->reports));
  };
  for (std::size_t r = 0; r < self->state.ranks.size(); ++r) {
    self->request(self->state.ranks[r], std::chrono::seconds(5), rank_state_atom::value)
        .then(
            [=](RankStateReport& report) {
              collection->reports[r] = std::move(report);
              answered();
            },
            [=](caf::error&) { answered(); });
  }
}

// A rank started afresh in place of rank `rank`.
void restart_rank(CoordinatorPointer self, RankId rank, const RankActor& actor) {
  auto& st = self->state;
  if (rank >= st.ranks.size()) return;
  st.ranks[rank] = actor;
  st.held[rank].clear();  // the decisions of the rank it replaces
  self->monitor(st.ranks[rank]);
  st.driver->rank_up(rank);
}

void take_topology(CoordinatorPointer self, const RankTopology& topology) {
  auto& st = self->state;
  st.ranks = topology.ranks;
  for (const auto& rank : st.ranks) self->monitor(rank);
  st.held.assign(st.ranks.size(), {});
}

std::vector<RankId> down_ranks(CoordinatorPointer self) {
  std::vector<RankId> down;
  for (RankId r = 0; r < self->state.ranks.size(); ++r) {
    if (self->state.driver->agreement().is_down(r)) down.push_back(r);
  }
  return down;
}

void set_phase_timeout(CoordinatorPointer self, std::int32_t timeout_ms) {
  auto& st = self->state;
  const auto clock = CoordinatorOptions::for_phase_timeout(std::chrono::milliseconds(timeout_ms));
  st.options.tick = clock.tick;
  st.driver->set_deadlines(clock.agreement);
  if (st.driver->agreeing()) arm_tick(self);
}

CoordinatorActor::behavior_type coordinator_actor(CoordinatorPointer self, SessionId session, RankId rank_count,
                                                  RankId expert_ranks, CoordinatorOptions options) {
  auto& s = self->state;
  s.driver = std::make_unique<TransactionDriver>(session, SessionRanks{rank_count, expert_ranks}, options.agreement);
  s.options = options;
  self->set_down_handler([=](caf::down_msg& down) {
    auto& ranks = self->state.ranks;
    for (RankId r = 0; r < ranks.size(); ++r) {
      if (ranks[r].address() == down.source) self->state.driver->rank_down(r);
    }
    pump(self);
  });
  // Hands what a rank reported to the driver, then sends what it has.
  auto to_driver = [=](auto&& report) {
    take_report(self, std::forward<decltype(report)>(report));
    pump(self);
  };
  return {
      [=](restart_atom, RankId rank, const RankActor& actor) { restart_rank(self, rank, actor); },
      [=](const RankTopology& topology) { take_topology(self, topology); },
      [=](const TransactionRequest& request) -> caf::result<TransactionReply> {
        auto& st = self->state;
        if (auto busy = st.driver->start(request)) return std::move(*busy);
        st.promise = self->make_response_promise<TransactionReply>();
        pump(self);
        return caf::delegated<TransactionReply>();
      },
      [=](const PhaseStatus& status) { to_driver(status); },
      [=](const AbortAcknowledgement& acknowledgement) { to_driver(acknowledgement); },
      [=](RankReports& reports) {
        for (auto& report : reports.items) {
          std::visit([&](auto& m) { take_report(self, std::move(m)); }, report);
        }
        pump(self);
      },
      [=](StepOutput& output) { to_driver(std::move(output)); },
      [=](const SamplingResult& sampled) { to_driver(sampled); },
      [=](PredictionTargetHidden& capture) { to_driver(std::move(capture)); },
      [=](const RankCheckpointReport& report) { to_driver(report); },
      [=](const PromptCacheReport& report) { to_driver(report); },
      [=](dropped_atom) -> std::vector<std::uint64_t> { return self->state.driver->agreement().dropped().counts(); },
      [=](down_atom) -> std::vector<RankId> { return down_ranks(self); },
      [=](rank_state_atom) -> caf::result<std::vector<RankStateReport>> {
        if (self->state.ranks.empty()) return std::vector<RankStateReport>{};
        collect_rank_states(self);
        return caf::delegated<std::vector<RankStateReport>>();
      },
      [=](tick_atom, std::uint64_t number) { on_tick(self, number); },
      [=](deadline_atom, std::int32_t timeout_ms) -> bool {
        set_phase_timeout(self, timeout_ms);
        return true;
      },
  };
}

}  // namespace

CoordinatorOptions CoordinatorOptions::for_phase_timeout(std::chrono::milliseconds timeout) {
  CoordinatorOptions options;
  options.tick = std::max(options.tick, timeout / 20);
  const auto ticks = static_cast<std::uint32_t>(std::max<std::int64_t>(1, timeout / options.tick));
  options.agreement = {ticks, ticks};
  return options;
}

CoordinatorActor spawn_coordinator(caf::actor_system& system, SessionId session, SessionRanks ranks,
                                   CoordinatorOptions options) {
  return system.spawn(coordinator_actor, session, ranks.ranks, ranks.expert_ranks, options);
}

}  // namespace accord
