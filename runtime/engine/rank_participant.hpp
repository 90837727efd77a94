// One rank's side of every transaction, whatever the transport
// (docs/architecture.md, "One engine"): a RankParticipant feeds RankAgreement the
// coordinator's messages, runs the rank's local part of each phase on its
// RankWorker and RankPromptCache, waits for what other ranks send
// (activations, a sample, a capture), carries out the rank's fault plan,
// commits and restores. What it sends goes through a RankOutbox that the
// transport implements: the direct engine queues it in the caller's
// thread, the rank actor (actors/rank_actors.hpp) sends it as CAF messages.
//
// The participant owns the rank's mutable state: the worker, the open step's
// data, the fault counters. Nothing else touches them; the transport hands
// it every message in turn.
//
// Threading: not thread-safe; one thread at a time (the transport's).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <variant>
#include <vector>

#include "messages/protocol.hpp"
#include "runtime/agreement/dropped_messages.hpp"
#include "runtime/agreement/rank_agreement.hpp"
#include "runtime/base/error.hpp"
#include "runtime/engine/rank_wire.hpp"
#include "runtime/fault/fault_plan.hpp"
#include "runtime/rank/phase.hpp"
#include "runtime/rank/rank_prompt_cache.hpp"
#include "runtime/rank/rank_worker.hpp"

namespace accord {

// What one rank sends another beside the protocol, for one step.
using PeerData = std::variant<RouteTransfer, ExpertTransfer, SamplingResult, PredictionTargetHidden>;

// Called on a rank after its local part of a phase succeeded; an error (or
// an exception) fails the phase as if the work had. Tests and fault
// scenarios use it.
using PhaseHook = std::function<Status(RankId rank, const PhaseId& phase, Epoch epoch)>;

class RankOutbox {
 public:
  virtual void to_coordinator(RankReport report) = 0;
  virtual void to_rank(RankId rank, PeerData data) = 0;
  // A `delay` fault holds the local work of `epoch`'s phase back: the
  // transport calls RankParticipant::run_held_back(epoch) once the status
  // deadline has passed (and before the abort's acknowledgement's has).
  virtual void hold_back(Epoch epoch) = 0;
  // An `exit` fault: the rank stops as if its process had died; the
  // transport lets the coordinator see it go down. The node does nothing
  // more.
  virtual void exit() = 0;

 protected:
  ~RankOutbox() = default;
};

class RankParticipant {
 public:
  // Rank worker->rank() of `rank_count`, with its share of `plan`. The
  // node is the worker's only holder (a shared_ptr, so that its deleter may
  // keep the model alive: actors/node.cpp). The prompt cache's files go
  // through `env`, which must outlive the participant.
  RankParticipant(std::shared_ptr<RankWorker> worker, SessionId session, RankId rank_count,
                  const std::vector<Fault>& plan, RankOutbox& outbox, Env& env = posix_env());

  void receive(const PhaseBegin& begin);
  void receive(const PhaseDecision& decision);
  // Data for this session's open or a later step; anything else is counted
  // and dropped.
  void receive(PeerData data);
  // Runs the phase a `delay` fault held back in `epoch`, if it still is.
  void run_held_back(Epoch epoch);

  // Replaces the rank's fault plan; occurrences count from now.
  void set_faults(const std::vector<Fault>& plan);
  void set_phase_hook(PhaseHook hook) { hook_ = std::move(hook); }
  void set_phase_timer(PhaseTimer timer) { timer_ = std::move(timer); }
  // From now on a prompt cache's root, as a coordinator names it, is a
  // plain name of an entry of `folder`, not a path; with no folder the rank
  // keeps no prompt cache. A node's rank is so confined (its
  // --prompt-cache-dir); an in-process rank takes its caller's paths.
  void confine_prompt_caches(std::optional<std::filesystem::path> folder);
  // The observer of the steps that begin from now on (nullptr: none).
  void lend_observer(std::shared_ptr<StepObserver> observer) { worker_->lend_observer(std::move(observer)); }
  // The batcher of the steps from now on (RankWorker::lend_batcher).
  void lend_batcher(StepBatcher* batcher) { worker_->lend_batcher(batcher); }

  RankId rank() const { return rank_; }
  bool exited() const { return exited_; }
  const RankWorker& worker() const { return *worker_; }
  // The rank's state after every decision it received so far.
  RankStateReport state_report() const;
  // What the machine and the participant dropped, by reason.
  DroppedMessages dropped() const;

 private:
  void pump();
  void carry_out(const RankAction& action);
  void restore(Epoch epoch);
  // Forgets the data and the wait of transaction `epoch` and those before.
  void forget_step(Epoch epoch);
  void stop_waiting(Epoch epoch);
  void run_phase(const RunPhase& run);
  void run_guarded(const RunPhase& run, const std::string& injected = {});
  void finish(const RunPhase& run, Status status);
  std::optional<Status> local_work(const RunPhase& run);
  Status report_checkpoint(Epoch epoch);
  std::optional<Status> boundary_ready(const RunPhase& run);
  std::optional<Status> expert_route(const RunPhase& run);
  std::optional<Status> run_with_experts(const RunPhase& run);
  std::optional<Status> serve_experts(const RunPhase& run);
  // The open step's rows from `source` for `unit`, taken out of the inbox.
  std::optional<ExpertTransfer> take_expert_rows(Epoch epoch, RankId source, int unit);
  void send_expert_rows(Epoch epoch, RankId target, int unit, std::vector<int> experts, std::vector<float> rows);
  std::optional<Status> publication(const RunPhase& run);
  std::optional<Status> capture_publication(const RunPhase& run);
  std::optional<Status> sampling(const RunPhase& run);
  Status prompt_cache(const RunPhase& run);
  Result<PromptCacheRequest> cache_request(const PromptCacheArguments& arguments) const;
  template <class Message>
  void share_with_every_rank(const Message& message);
  void keep(RouteTransfer transfer) { activations_ = std::move(transfer); }
  void keep(ExpertTransfer transfer) { expert_rows_.push_back(std::move(transfer)); }
  void keep(SamplingResult sampled) { sampled_ = sampled; }
  void keep(PredictionTargetHidden capture) { capture_ = std::move(capture); }

  std::shared_ptr<RankWorker> worker_;
  RankPromptCache cache_;
  RankAgreement machine_;
  SessionId session_;
  RankId rank_;
  RankId rank_count_;
  RankOutbox& outbox_;
  RankFaults faults_;
  FaultMarks marks_;  // of the drop and corrupt faults that fired
  PhaseHook hook_;
  PhaseTimer timer_;
  bool exited_ = false;
  bool confined_ = false;
  std::optional<std::filesystem::path> cache_folder_;  // when confined_
  DroppedMessages dropped_data_;                       // data beside the protocol; the machine counts the rest

  // What other ranks sent for the open step, and the phase waiting for it.
  std::optional<RouteTransfer> activations_;
  std::optional<SamplingResult> sampled_;
  std::optional<PredictionTargetHidden> capture_;
  // Expert routes (docs/protocol.md, "Expert routes"): the rows that came,
  // the helpers whose outputs this rank's unit still waits for, and the
  // next unit of another stage this rank serves.
  std::vector<ExpertTransfer> expert_rows_;
  struct ExpertWait {
    Epoch epoch = 0;
    int unit = 0;
    std::vector<int> helpers;
  };
  std::optional<ExpertWait> expert_wait_;
  struct Serving {
    Epoch epoch = 0;
    RankId stage = 0;
    int next_unit = 0;
  };
  std::optional<Serving> serving_;
  std::optional<RunPhase> waiting_;
  std::optional<RunPhase> held_back_;   // by a `delay` fault
  std::vector<RankReady> spare_ready_;  // pump's buffers, one a level of its recursion
};

}  // namespace accord
