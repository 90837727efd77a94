// The slots of `accord serve`: K sessions (--parallel K), fed from one
// bounded queue by K worker threads, each of which generates one request at
// a time on the slot it picks for it; single-rank slots batch their steps
// together. Each slot's session is its own transaction unit, so one
// request's abort, retry or stop never touches another's tokens.
//
// A slot keeps the tokens its last request left (SlotReuse::prefix, as
// llama-server's cache_prompt): a request goes to the free slot whose
// tokens begin its prompt the most (choose_slot), which moves back to the
// prefix they share and prefills only the rest
// (GenerationOptions::reuse_held_prefix). Single-rank slots also share a
// PrefixStore (prefix_store.hpp): once a request's prompt is prefilled its
// slot snapshots it into the store, and a request whose prompt begins with
// more of a stored snapshot than of any free slot's tokens goes to the
// least recently used free slot, which restores the snapshot and prefills
// only the rest. With SlotReuse::none a slot is reset to an empty session
// before each request, and the store is not used.
//
// A job may ask for several completions of its prompt (OpenAI's n): they
// run one after another on its slot, each moving back to the prompt it
// holds, so the prompt is prefilled once. A slot whose session was
// poisoned, or could not be reset, is reset after its request (a
// distributed session reconnects its lost ranks) and before its next, and
// the scheduler is not ready meanwhile.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/generate/generator.hpp"
#include "runtime/generate/target.hpp"
#include "runtime/model/kv_pool.hpp"
#include "runtime/rank/step_batcher.hpp"
#include "runtime/serve/cluster_status.hpp"
#include "runtime/serve/prefix_store.hpp"
#include "runtime/session/session.hpp"
#include "runtime/text/tokenizer.hpp"

namespace accord::serve {

// What a slot does with the tokens its last request left.
enum class SlotReuse {
  prefix,  // keeps them: the next request prefills only what they do not begin
  none,    // starts each request on an empty session
};

// What the scheduler knows of a free slot when it picks one.
struct SlotHolding {
  std::span<const int> tokens;  // what its session holds
  std::uint64_t last_used = 0;  // when it last took a request: larger is later
};

// The slot a prompt's tokens go to, as llama-server picks one: of the
// slots that would keep more than a tenth of the prompt
// (reusable_prefix_length), the one that keeps the most; else, and among
// equals, the one used least recently. `slots` is not empty.
std::size_t choose_slot(std::span<const int> prompt, std::span<const SlotHolding> slots);

// The idle slots to empty, least recently used first, so that a request
// whose keys and values need `need` bytes has room in a pool with `free`
// bytes: as few as cover it, a slot giving back room_of(its tokens), or
// all that hold any when even that does not (the request then fails as a
// spent pool fails a step). Indexes into `idle`.
std::vector<std::size_t> slots_to_empty(std::span<const SlotHolding> idle, std::uint64_t need, std::uint64_t free,
                                        const std::function<std::uint64_t(std::size_t tokens)>& room_of);

// The KV pool single-rank slots share (kv_pool.hpp) and what a position
// takes in it: with a budget, a request first evicts the prefix store's
// snapshots, least recently used first, then empties idle slots it needs
// the room of (slots_to_empty), as llama-server's slots and vLLM's blocks
// are reclaimed.
struct KvRoom {
  std::shared_ptr<const KvPool> pool;
  std::uint64_t position_bytes = 0;
};

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
  // Snapshots of the session, for the prefix store: only single-rank slots
  // take them.
  virtual bool takes_snapshots() const { return false; }
  virtual Result<SessionSnapshot> snapshot() { return Error(ErrorCode::contract, "this slot takes no snapshots"); }
  virtual Status restore(const SessionSnapshot& /*snapshot*/) {
    return Error(ErrorCode::contract, "this slot takes no snapshots");
  }
  // What each of its session's ranks holds now, in rank order (none: the
  // slot does not say).
  virtual Result<std::vector<RankFigures>> rank_figures() { return std::vector<RankFigures>{}; }
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
  bool takes_snapshots() const override { return true; }
  Result<SessionSnapshot> snapshot() override { return session_.snapshot(); }
  Status restore(const SessionSnapshot& snapshot) override { return session_.restore(snapshot); }
  Result<std::vector<RankFigures>> rank_figures() override;

 private:
  Session session_;
  SessionTarget target_;
  StepBatcher* batcher_;
};

// One request's generation. The callbacks run on the slot's thread.
struct Job {
  std::string prompt;
  GenerationOptions options;  // its stop_requested is asked after each step
  // Completions of the prompt (at least 1), one after another; the
  // i-th samples with options.sampler.seed + i.
  int choices = 1;
  std::function<void(int choice)> on_choice;  // before each completion's generation
  PieceSink on_piece;
  // Each completion's outcome, in order: all of them, or those up to the
  // first that failed (or that was cut).
  std::function<void(const std::vector<GenerationOutcome>&)> on_done;
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
  // `store` (may be nullptr: none) keeps single-rank slots' prompts.
  Scheduler(const Tokenizer& tokenizer, std::vector<std::unique_ptr<SlotSession>> slots, int queue_limit,
            LoadSink load = {}, WarningSink warn = {}, SlotReuse reuse = SlotReuse::prefix, KvRoom room = {},
            std::shared_ptr<PrefixStore> store = nullptr);
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
    // Guarded by mutex_: whether a worker holds the slot, the tokens its
    // session held when the last one released it, and when it was taken.
    bool busy = false;
    std::vector<int> held;
    std::uint64_t last_used = 0;
  };

  // Where a job runs: its slot, the store's snapshot the slot starts from
  // (when it holds a longer prefix of the prompt than the slot), and the
  // idle slots to empty for its room (taken too: the caller empties and
  // releases them).
  struct Placement {
    Slot* slot = nullptr;
    std::optional<PrefixStore::Match> from_store;
    std::vector<Slot*> to_empty;
  };

  void work();
  bool next_job(Job& job);
  // The prompt's tokens, to pick a slot by (none without reuse).
  std::vector<int> slot_key(const Job& job) const;
  Placement place(std::span<const int> prompt, int max_tokens);
  // Under mutex_: the store's match, when it keeps more of the prompt than
  // `kept` tokens.
  std::optional<PrefixStore::Match> store_match(std::span<const int> prompt, int kept);
  std::vector<Slot*> make_room(const Slot& chosen, std::span<const int> prompt, int max_tokens, int kept);
  bool keeps_prompts(const Slot& slot) const;
  void keep_prompt(Slot& slot);  // snapshots the prompt the slot holds into the store
  void empty(Slot& slot);        // resets a slot the caller holds and releases it
  void release(Slot& slot);
  // The job's completions on `slot`, starting from `from_store`'s snapshot
  // when there is one; slot.ready false after it: the slot must be reset
  // before its next request.
  std::vector<GenerationOutcome> run(Slot& slot, Job& job, const std::optional<PrefixStore::Match>& from_store);
  // Gets the slot ready for a job; a failure ends it.
  Status prepare(Slot& slot, const std::optional<PrefixStore::Match>& from_store);
  GenerationOutcome run_choice(Slot& slot, Job& job, int choice);
  void report_load();

  const Tokenizer& tokenizer_;
  std::vector<std::unique_ptr<Slot>> slots_;
  const std::size_t queue_limit_;
  LoadSink load_;
  WarningSink warn_;
  const SlotReuse reuse_;
  const KvRoom room_;
  const std::shared_ptr<PrefixStore> store_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> queue_;
  int active_ = 0;
  std::uint64_t slots_taken_ = 0;  // the clock of Slot::last_used
  bool stopping_ = false;
  bool closed_ = false;               // shut_down() was called
  std::atomic<bool> cutting_{false};  // stop_running(): asked by running jobs after each step
  std::vector<std::thread> workers_;
};

}  // namespace accord::serve
