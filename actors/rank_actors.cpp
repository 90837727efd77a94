#include "actors/rank_actors.hpp"

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/batched_send.hpp"
#include "runtime/engine/rank_participant.hpp"

namespace accord {

namespace {

// What the rank's participant sends, as CAF messages.
class ActorOutbox final : public RankOutbox {
 public:
  // A `delay` fault holds local work back for `fault_delay`.
  ActorOutbox(RankActor::pointer self, CoordinatorActor coordinator, std::chrono::milliseconds fault_delay)
      : self_(self), coordinator_(std::move(coordinator)), fault_delay_(fault_delay) {}

  void set_ranks(const std::vector<RankActor>& ranks) { ranks_ = ranks; }

  // Held until the handler that reported it ends (flush).
  void to_coordinator(RankReport report) override { held_.push_back(std::move(report)); }

  // Data for a rank of this process is held too, and goes after the
  // reports (flush): a CAF worker runs the actor it scheduled last first,
  // so the rank whose turn it is in the pipeline computes before the
  // coordinator takes the reports, which no rank waits for. Data for a
  // remote rank crosses the network and goes at once. Before the topology
  // came there is no one to send to; the phase then waits for nothing that
  // could arrive, and its deadline aborts it.
  void to_rank(RankId rank, PeerData data) override {
    if (rank >= ranks_.size()) return;
    if (ranks_[rank].node() == self_->node()) {
      held_data_.emplace_back(rank, std::move(data));
    } else {
      send_data(rank, data);
    }
  }

  // What one handler reported goes to the coordinator as one message: a
  // rank that runs several riders in one go reports them at once.
  void flush() {
    send_batched<RankReports>(self_, coordinator_, held_);
    for (auto& [rank, data] : held_data_) send_data(rank, data);
    held_data_.clear();
  }

  void hold_back(Epoch epoch) override { self_->delayed_send(self_, fault_delay_, delayed_atom::value, epoch); }

  // The coordinator's monitor sees the rank go down, after what the rank
  // reported before.
  void exit() override {
    flush();
    self_->quit(caf::exit_reason::kill);
  }

 private:
  void send_data(RankId rank, PeerData& data) {
    std::visit([&](auto& message) { self_->send(ranks_[rank], std::move(message)); }, data);
  }

  RankActor::pointer self_;
  CoordinatorActor coordinator_;
  std::chrono::milliseconds fault_delay_;
  std::vector<RankActor> ranks_;                        // every rank's actor, in rank order
  std::vector<RankReport> held_;                        // for the coordinator, in order
  std::vector<std::pair<RankId, PeerData>> held_data_;  // for ranks of this process, in order
};

struct RankState {
  std::unique_ptr<ActorOutbox> outbox;
  std::unique_ptr<RankParticipant> participant;
};

RankActor::behavior_type rank_actor(RankActor::stateful_pointer<RankState> self, std::shared_ptr<RankWorker> worker,
                                    SessionId session, RankId rank_count, CoordinatorActor coordinator,
                                    const RankOptions& options) {
  auto& s = self->state;
  // Past the deadline, with room for the abort's acknowledgement (whose
  // deadline is as long again) once the held-back work is done.
  s.outbox =
      std::make_unique<ActorOutbox>(self, std::move(coordinator), options.phase_timeout + options.phase_timeout / 2);
  s.participant = std::make_unique<RankParticipant>(std::move(worker), session, rank_count, options.faults, *s.outbox);
  if (options.confinement) s.participant->confine_prompt_caches(options.confinement->prompt_cache_folder);
  const bool takes_faults = !options.confinement || options.confinement->allow_faults;
  // Hands what arrived to the participant, then sends what it reported.
  auto to_participant = [=](auto&& message) {
    self->state.participant->receive(std::forward<decltype(message)>(message));
    self->state.outbox->flush();
  };
  return {
      [=](const PhaseBegin& begin) { to_participant(begin); },
      [=](const PhaseDecision& decision) { to_participant(decision); },
      [=](const RankInstructions& instructions) {
        for (const auto& item : instructions.items) {
          std::visit([&](const auto& instruction) { self->state.participant->receive(instruction); }, item);
        }
        self->state.outbox->flush();
      },
      [=](RouteTransfer& transfer) { to_participant(PeerData(std::move(transfer))); },
      [=](ExpertTransfer& transfer) { to_participant(PeerData(std::move(transfer))); },
      [=](const SamplingResult& sampled) { to_participant(PeerData(sampled)); },
      [=](PredictionTargetHidden& capture) { to_participant(PeerData(std::move(capture))); },
      [=](const RankTopology& topology) { self->state.outbox->set_ranks(topology.ranks); },
      [=](const LentObserver& lent) { self->state.participant->lend_observer(lent.observer); },
      [=](rank_state_atom) -> RankStateReport { return self->state.participant->state_report(); },
      [=](faults_atom, const std::vector<Fault>& plan) -> bool {
        if (!takes_faults) return false;
        self->state.participant->set_faults(plan);
        return true;
      },
      [=](delayed_atom, Epoch epoch) {
        self->state.participant->run_held_back(epoch);
        self->state.outbox->flush();
      },
      [=](dropped_atom) -> std::vector<std::uint64_t> { return self->state.participant->dropped().counts(); },
  };
}

}  // namespace

RankActor spawn_rank(caf::actor_system& system, std::shared_ptr<RankWorker> worker, SessionId session,
                     RankId rank_count, CoordinatorActor coordinator, const RankOptions& options) {
  // A rank on a device runs on a thread of its own: its CUDA calls block
  // (copies, synchronisation) and never hold a scheduler thread.
  if (worker->computes_on_device()) {
    return system.spawn<caf::detached>(rank_actor, std::move(worker), session, rank_count, std::move(coordinator),
                                       options);
  }
  return system.spawn(rank_actor, std::move(worker), session, rank_count, std::move(coordinator), options);
}

}  // namespace accord
