// The transaction engine over the direct transport (docs/architecture.md,
// "One engine"): the TransactionDriver and every rank's RankParticipant live in
// the caller's thread, and messages
// pass by function call, in the order they were sent. No actors and no
// threads of its own: the ranks compute on the pool they are given. The
// one-rank Session runs on it; the same plan, machines, local work, undo
// and fault plans run under the CAF transports (actors/).
//
// Time is a count of ticks that passes only while nothing is left to
// deliver and the agreement waits (a dropped status, a delayed phase): the
// deadlines of AgreementOptions then pass deterministically, never because
// the machine is slow.
//
// Threading: one call at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "messages/session_api.hpp"
#include "runtime/agreement/coordinator_agreement.hpp"
#include "runtime/base/error.hpp"
#include "runtime/engine/rank_participant.hpp"
#include "runtime/fault/fault_plan.hpp"
#include "runtime/model/model.hpp"
#include "runtime/rank/partition.hpp"
#include "runtime/rank/rank_worker.hpp"

namespace accord {

struct DirectEngineOptions {
  AgreementOptions agreement;
  std::vector<Fault> faults;  // every rank's plan (runtime/fault/fault_plan.hpp)
  Env* env = nullptr;         // the prompt cache's files; nullptr: posix_env()
  StageOptions stage = {};    // where each rank computes, its weights budget (rank_stage.hpp)
};

class DirectEngine {
 public:
  // Ranks as `partition` has them, over `model` (which must outlive the
  // engine) and `pool`. `model_identity` is the model's, computed once.
  DirectEngine(const Model& model, std::shared_ptr<cpu::ThreadPool> pool, const Partition& partition,
               const std::string& model_identity, SessionId session, DirectEngineOptions options = {});
  ~DirectEngine();
  DirectEngine(const DirectEngine&) = delete;
  DirectEngine& operator=(const DirectEngine&) = delete;

  // Runs one transaction to its end: committed, refused, aborted (every
  // rank restored) or poisoned. A reset first starts again, without
  // faults, every rank an `exit` fault stopped.
  TransactionReply run(const TransactionRequest& request);

  // Lends every rank the observer of the steps that begin from now on.
  void lend_observer(std::shared_ptr<StepObserver> observer);
  // Lends every rank the batcher its steps join from now on where they can
  // (RankWorker::lend_batcher); nullptr: none.
  void lend_batcher(StepBatcher* batcher);
  void set_phase_hook(PhaseHook hook);
  void set_phase_timer(PhaseTimer timer);
  // Replaces every rank's fault plan; occurrences count from now.
  Status inject_faults(const std::vector<Fault>& plan);

  int ranks() const;
  const RankWorker& worker(int rank) const;
  // Whether the last transaction left the session poisoned.
  bool poisoned() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace accord
