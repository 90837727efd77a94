// The slots of `accord serve`: K sessions (--parallel K), each generating
// one request at a time on a thread of its own, fed from one bounded
// queue. Each slot's session is its own transaction unit, so one request's
// abort, retry or stop never touches another's tokens. A slot is reset to
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
#include <thread>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/generate/generator.hpp"
#include "runtime/generate/target.hpp"
#include "runtime/model/tokenizer.hpp"
#include "runtime/session/session.hpp"

namespace accord::serve {

// The session a slot generates on.
class SlotSession {
 public:
  virtual ~SlotSession() = default;
  virtual GenerationTarget& target() = 0;
  // Back to an empty session; heals a poisoned one where it can.
  virtual Status reset() = 0;
};

// A slot on a single-rank session. The slots may share one pool: it runs
// one kernel at a time, each on all its threads, so one request alone
// computes as fast as `accord generate`, and several take turns kernel by
// kernel instead of crowding the cores with threads.
class SessionSlot final : public SlotSession {
 public:
  SessionSlot(const Model& model, cpu::ThreadPool& pool) : session_(model, pool), target_(session_) {}
  GenerationTarget& target() override { return target_; }
  Status reset() override { return session_.reset(); }

 private:
  Session session_;
  SessionTarget target_;
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

  // False when queue_limit jobs already wait: the caller answers 429.
  bool submit(Job job);
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
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> queue_;
  int active_ = 0;
  bool stopping_ = false;
  std::atomic<bool> shutting_down_{false};  // asked by running jobs after each step
  std::vector<std::thread> workers_;
};

}  // namespace accord::serve
