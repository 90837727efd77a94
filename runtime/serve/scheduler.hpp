// The slots of `accord serve`: K sessions (--parallel K), each generating
// one request at a time on a thread of its own, fed from one bounded
// queue; single-rank slots batch their steps together. Each slot's session
// is its own transaction unit, so one request's abort, retry or stop never
// touches another's tokens. A slot is reset to
// an empty session before each request; a slot whose session was poisoned
// is healed by that reset (a distributed session reconnects its lost
// ranks) before it takes the next request, and the scheduler is not ready
// meanwhile.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/generate/generator.hpp"
#include "runtime/generate/target.hpp"
#include "runtime/rank/step_batcher.hpp"
#include "runtime/session/session.hpp"
#include "runtime/text/tokenizer.hpp"

namespace accord::serve {

// The session a slot generates on.
class SlotSession {
 public:
  virtual ~SlotSession() = default;
  virtual GenerationTarget& target() = 0;
  // Back to an empty session; heals a poisoned one where it can.
  virtual Status reset() = 0;
  // Around each request's generation.
  virtual void begin_request() {}
  virtual void end_request() {}
};

// A slot on a single-rank session. The slots share one pool, which runs one
// kernel at a time on all its threads, so one request alone computes as
// fast as `accord generate`. With a batcher, the slots generating at the
// same time run their steps in one batch (continuous batching,
// step_batcher.hpp): a decode step reads the weights once for all of them.
// A slot is one of the batcher's members while it generates a request.
class SessionSlot final : public SlotSession {
 public:
  // batcher (may be nullptr: each slot's steps run alone) and pool must
  // outlive the slot; `timer` is told each phase's local work. The slots
  // share `stage`'s KV pool, when it has one.
  SessionSlot(const Model& model, cpu::ThreadPool& pool, StepBatcher* batcher = nullptr, PhaseTimer timer = {},
              const StageOptions& stage = {})
      : session_(model, pool, stage), target_(session_), batcher_(batcher) {
    session_.batch_steps_with(batcher);
    session_.set_phase_timer(std::move(timer));
  }
  GenerationTarget& target() override { return target_; }
  Status reset() override { return session_.reset(); }
  // Session::inject_faults: the plan's occurrences count over the slot's life.
  Status inject_faults(const std::vector<Fault>& plan) { return session_.inject_faults(plan); }
  void begin_request() override {
    if (batcher_ != nullptr) batcher_->join();
  }
  void end_request() override {
    if (batcher_ != nullptr) batcher_->leave();
  }

 private:
  Session session_;
  SessionTarget target_;
  StepBatcher* batcher_;
};

// One request's generation. The callbacks run on the slot's thread.
struct Job {
  std::string prompt;
  GenerationOptions options;  // its stop_requested is asked after each step
  PieceSink on_piece;
  std::function<void(const GenerationOutcome&)> on_done;
  // True once nobody waits for the answer (the client went away): a queued
  // job then fails without running, a running one stops after its step.
  std::function<bool()> abandoned;
};

inline constexpr std::string_view kShutdownMessage = "the server is shutting down";
inline constexpr std::string_view kShutdownCutMessage = "the server shut down before the completion finished";

// Called with the queue's depth and the slots in use whenever they change.
using LoadSink = std::function<void(int queued, int active)>;

class Scheduler {
 public:
  // `warn` receives what generation warns of (a rejected prompt cache).
  Scheduler(const Tokenizer& tokenizer, std::vector<std::unique_ptr<SlotSession>> slots, int queue_limit,
            LoadSink load = {}, WarningSink warn = {});
  ~Scheduler();  // stops the running jobs after their step, drops the queued ones
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // False when queue_limit jobs already wait (the caller answers 429), or
  // after shut_down().
  bool submit(Job job);
  // The first step of a graceful shutdown: takes no more jobs and ends each
  // queued one, unrun, with the failure kShutdownMessage (a state error);
  // running jobs go on.
  void shut_down();
  // The last: each running job stops after its step and ends with the
  // failure kShutdownCutMessage, its partial result with it.
  void stop_running();
  // No job queued or running.
  bool idle() const;
  // Every slot usable: none is poisoned or recovering.
  bool ready() const;
  int slots() const { return static_cast<int>(slots_.size()); }

 private:
  struct Slot {
    std::unique_ptr<SlotSession> session;
    std::atomic<bool> ready{true};
  };

  void work(Slot& slot);
  bool next_job(Job& job);
  void run(Slot& slot, Job& job);
  void report_load();

  const Tokenizer& tokenizer_;
  std::vector<std::unique_ptr<Slot>> slots_;
  const std::size_t queue_limit_;
  LoadSink load_;
  WarningSink warn_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> queue_;
  int active_ = 0;
  bool stopping_ = false;
  bool closed_ = false;               // shut_down() was called
  std::atomic<bool> cutting_{false};  // stop_running(): asked by running jobs after each step
  std::vector<std::thread> workers_;
};

}  // namespace accord::serve
