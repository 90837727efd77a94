#include "runtime/serve/scheduler.hpp"

#include <algorithm>
#include <tuple>

#include "runtime/base/assert.hpp"

namespace accord::serve {

std::size_t choose_slot(std::span<const int> prompt, std::span<const SlotHolding> slots) {
  ACCORD_ASSERT(!slots.empty(), "a slot is chosen among free ones, and one is free");
  // A slot's merit: the tokens it keeps, when they are more than a tenth
  // of the prompt (llama-server's --slot-prompt-similarity), then the
  // longest unused.
  const auto merit = [&](const SlotHolding& slot) {
    const int kept = reusable_prefix_length(slot.tokens, prompt);
    const bool similar = kept * 10 > static_cast<int>(prompt.size());
    return std::make_tuple(similar ? kept : 0, ~slot.last_used);
  };
  std::size_t best = 0;
  for (std::size_t i = 1; i < slots.size(); ++i) {
    if (merit(slots[i]) > merit(slots[best])) best = i;
  }
  return best;
}

Scheduler::Scheduler(const Tokenizer& tokenizer, std::vector<std::unique_ptr<SlotSession>> slots, int queue_limit,
                     LoadSink load, WarningSink warn, SlotReuse reuse)
    : tokenizer_(tokenizer),
      queue_limit_(static_cast<std::size_t>(std::max(0, queue_limit))),
      load_(std::move(load)),
      warn_(std::move(warn)),
      reuse_(reuse) {
  for (auto& session : slots) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->session = std::move(session);
  }
  // As many workers as slots: a worker that holds a job always finds a
  // free slot.
  for (std::size_t i = 0; i < slots_.size(); ++i) workers_.emplace_back([this] { work(); });
}

bool Scheduler::ready() const {
  for (const auto& slot : slots_) {
    if (!slot->ready.load()) return false;
  }
  return true;
}

Scheduler::~Scheduler() {
  shut_down();
  stop_running();
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

bool Scheduler::submit(Job job) {
  {
    std::lock_guard lock(mutex_);
    if (closed_ || queue_.size() >= queue_limit_) return false;
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
  report_load();
  return true;
}

void Scheduler::shut_down() {
  std::deque<Job> unrun;
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    unrun.swap(queue_);
  }
  for (Job& job : unrun) job.on_done(GenerationFailure{Error(ErrorCode::state, std::string(kShutdownMessage)), {}});
  if (!unrun.empty()) report_load();
}

void Scheduler::stop_running() { cutting_ = true; }

bool Scheduler::idle() const {
  std::lock_guard lock(mutex_);
  return queue_.empty() && active_ == 0;
}

void Scheduler::report_load() {
  if (!load_) return;
  int queued = 0;
  int active = 0;
  {
    std::lock_guard lock(mutex_);
    queued = static_cast<int>(queue_.size());
    active = active_;
  }
  load_(queued, active);
}

bool Scheduler::next_job(Job& job) {
  std::unique_lock lock(mutex_);
  wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
  if (stopping_) return false;
  job = std::move(queue_.front());
  queue_.pop_front();
  ++active_;
  return true;
}

void Scheduler::work() {
  Job job;
  while (next_job(job)) {
    report_load();
    Slot& slot = take_slot(slot_key(job));
    run(slot, job);
    release(slot);
    {
      std::lock_guard lock(mutex_);
      --active_;
    }
    report_load();
  }
}

// Tokenized here, on the worker's thread: never on the caller's. A prompt
// that does not encode picks by age alone, and generation says why.
std::vector<int> Scheduler::slot_key(const Job& job) const {
  if (reuse_ == SlotReuse::none) return {};
  auto tokens = encode_prompt(tokenizer_, job.prompt);
  return tokens ? std::move(*tokens) : std::vector<int>{};
}

Scheduler::Slot& Scheduler::take_slot(std::span<const int> prompt) {
  std::lock_guard lock(mutex_);
  std::vector<Slot*> free;
  std::vector<SlotHolding> holdings;
  for (const auto& slot : slots_) {
    if (slot->busy) continue;
    free.push_back(slot.get());
    holdings.push_back({slot->held, slot->last_used});
  }
  Slot& chosen = *free.at(choose_slot(prompt, holdings));
  chosen.busy = true;
  chosen.last_used = ++slots_taken_;
  return chosen;
}

void Scheduler::release(Slot& slot) {
  const auto tokens = slot.session->target().tokens();
  std::lock_guard lock(mutex_);
  slot.held.assign(tokens.begin(), tokens.end());
  slot.busy = false;
}

// A session that cannot be reset is as unusable as a poisoned one: the job
// fails so, and the slot stays unready until a later reset succeeds.
void Scheduler::run(Slot& slot, Job& job) {
  const auto abandoned = [&job] { return job.abandoned && job.abandoned(); };
  if (abandoned()) {
    job.on_done(GenerationFailure{Error(ErrorCode::contract, "the client went away before generation began"), {}});
    return;
  }
  if (reuse_ == SlotReuse::none || !slot.ready) {
    Status reset = slot.session->reset();
    slot.ready = static_cast<bool>(reset);
    if (!reset) {
      GenerationFailure failure{reset.error(), {}};
      failure.partial.stop_reason = StopReason::error;
      failure.partial.poisoned = true;
      failure.partial.poison_cause = reset.error().message();
      job.on_done(failure);
      return;
    }
  }
  job.options.reuse_held_prefix = reuse_ == SlotReuse::prefix;
  auto asked = std::move(job.options.stop_requested);
  job.options.stop_requested = [this, &asked, &abandoned] {
    return cutting_.load() || abandoned() || (asked && asked());
  };
  slot.session->begin_request();
  GenerationOutcome outcome =
      generate(slot.session->target(), tokenizer_, job.prompt, job.options, job.on_piece, warn_);
  slot.session->end_request();
  if (outcome && outcome->stop_reason == StopReason::stopped && cutting_.load()) {
    outcome->stop_reason = StopReason::error;
    outcome = GenerationFailure{Error(ErrorCode::state, std::string(kShutdownCutMessage)), std::move(*outcome)};
  }
  if (!outcome && outcome.error().partial.poisoned) slot.ready = false;
  job.on_done(outcome);
  // Heal now, so that the next request does not wait for it.
  if (!slot.ready) slot.ready = static_cast<bool>(slot.session->reset());
}

}  // namespace accord::serve
