#include "runtime/serve/scheduler.hpp"

#include <algorithm>
#include <tuple>

#include "runtime/base/assert.hpp"
#include "runtime/model/kv_cache.hpp"

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

std::vector<std::size_t> slots_to_empty(std::span<const SlotHolding> idle, std::uint64_t need, std::uint64_t free,
                                        const std::function<std::uint64_t(std::size_t tokens)>& room_of) {
  std::vector<std::size_t> order(idle.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return idle[a].last_used < idle[b].last_used; });
  std::vector<std::size_t> emptied;
  for (std::size_t i : order) {
    if (free >= need) break;
    if (idle[i].tokens.empty()) continue;
    emptied.push_back(i);
    free += room_of(idle[i].tokens.size());
  }
  return emptied;
}

Scheduler::Scheduler(const Tokenizer& tokenizer, std::vector<std::unique_ptr<SlotSession>> slots, int queue_limit,
                     LoadSink load, WarningSink warn, SlotReuse reuse, KvRoom room, std::shared_ptr<PrefixStore> store)
    : tokenizer_(tokenizer),
      queue_limit_(static_cast<std::size_t>(std::max(0, queue_limit))),
      load_(std::move(load)),
      warn_(std::move(warn)),
      reuse_(reuse),
      room_(std::move(room)),
      store_(std::move(store)) {
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
  for (Job& job : unrun) {
    job.on_done({GenerationFailure{Error(ErrorCode::state, std::string(kShutdownMessage)), {}}});
  }
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
    Placement placed = place(slot_key(job), job.options.max_tokens);
    for (Slot* idle : placed.to_empty) empty(*idle);
    Slot& slot = *placed.slot;
    const std::vector<GenerationOutcome> outcome = run(slot, job, placed.from_store);
    placed.from_store.reset();  // the store may have let it go: its blocks go back now
    // A healthy slot is free before the client hears the answer, so that
    // its next request finds it (and its room); a poisoned one heals
    // first, after the answer, so that the answer does not wait for it.
    const bool healthy = slot.ready;
    if (healthy) release(slot);
    job.on_done(outcome);
    if (!healthy) empty(slot);
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

Scheduler::Placement Scheduler::place(std::span<const int> prompt, int max_tokens) {
  std::lock_guard lock(mutex_);
  std::vector<Slot*> free;
  std::vector<SlotHolding> holdings;
  for (const auto& slot : slots_) {
    if (slot->busy) continue;
    free.push_back(slot.get());
    holdings.push_back({slot->held, slot->last_used});
  }
  Placement placed;
  std::size_t chosen = choose_slot(prompt, holdings);
  int kept = reusable_prefix_length(holdings[chosen].tokens, prompt);
  if (keeps_prompts(*free[chosen])) placed.from_store = store_match(prompt, kept);
  if (placed.from_store) {
    // The slot used least recently restores it: its tokens are worth least.
    chosen = choose_slot({}, holdings);
    kept = reusable_prefix_length(placed.from_store->snapshot.tokens, prompt);
  }
  placed.slot = free[chosen];
  placed.slot->busy = true;
  placed.slot->last_used = ++slots_taken_;
  placed.to_empty = make_room(*placed.slot, prompt, max_tokens, placed.from_store ? kept : -1);
  return placed;
}

std::optional<PrefixStore::Match> Scheduler::store_match(std::span<const int> prompt, int kept) {
  auto match = store_->lookup(prompt);
  if (!match || reusable_prefix_length(match->snapshot.tokens, prompt) <= kept) return std::nullopt;
  return match;
}

bool Scheduler::keeps_prompts(const Slot& slot) const {
  return store_ != nullptr && store_->enabled() && reuse_ == SlotReuse::prefix && slot.session->takes_snapshots();
}

// Under mutex_. The request may write up to prompt + max_tokens positions,
// of which the chosen slot already holds room for its held tokens'; room
// is taken in whole blocks. Where the store keeps prompts, blocks may be
// shared with its snapshots, and a shared block is copied when written:
// the request may take every block from the one its kept prefix ends in
// (`kept`: from the store's snapshot; -1: the slot's own tokens), and a
// copy of its prompt's last block once the prompt's snapshot shares it.
std::vector<Scheduler::Slot*> Scheduler::make_room(const Slot& chosen, std::span<const int> prompt, int max_tokens,
                                                   int kept) {
  if (room_.pool == nullptr || room_.pool->budget_bytes() == 0) return {};
  const std::uint64_t block = KvCache::kBlockPositions * room_.position_bytes;
  const auto room_of = [block](std::size_t tokens) {
    return (tokens + KvCache::kBlockPositions - 1) / KvCache::kBlockPositions * block;
  };
  std::uint64_t wanted = room_of(prompt.size() + static_cast<std::size_t>(max_tokens));
  std::uint64_t held = room_of(chosen.held.size());
  if (keeps_prompts(chosen)) {
    if (kept < 0) kept = reusable_prefix_length(chosen.held, prompt);
    held = static_cast<std::uint64_t>(kept / KvCache::kBlockPositions) * block;
    if (prompt.size() >= KvCache::kBlockPositions) wanted += block;
  }
  const std::uint64_t need = wanted > held ? wanted - held : 0;
  const std::uint64_t budget = room_.pool->budget_bytes();
  const auto free_bytes = [&] {
    const std::uint64_t used = room_.pool->used_bytes();
    return used < budget ? budget - used : 0;
  };
  // The store's snapshots go first: no request is using them.
  while (store_ != nullptr && free_bytes() < need && store_->evict_oldest()) {
  }
  std::vector<Slot*> idle;
  std::vector<SlotHolding> holdings;
  for (const auto& slot : slots_) {
    if (slot->busy) continue;
    idle.push_back(slot.get());
    holdings.push_back({slot->held, slot->last_used});
  }
  std::vector<Slot*> emptied;
  for (std::size_t i : slots_to_empty(holdings, need, free_bytes(), room_of)) {
    idle[i]->busy = true;
    emptied.push_back(idle[i]);
  }
  return emptied;
}

// A snapshot that cannot be taken is a warning: the request goes on, and
// later ones prefill the prompt again.
void Scheduler::keep_prompt(Slot& slot) {
  auto snapshot = slot.session->snapshot();
  if (!snapshot) {
    if (warn_) warn_("the prompt was not kept for later requests: " + snapshot.error().message());
    return;
  }
  store_->insert(std::move(*snapshot));
}

// Gives back an idle slot's keys and values: its session is reset, and it
// is free again, holding nothing.
void Scheduler::empty(Slot& slot) {
  slot.ready = static_cast<bool>(slot.session->reset());
  release(slot);
}

void Scheduler::release(Slot& slot) {
  const auto tokens = slot.session->target().tokens();
  std::lock_guard lock(mutex_);
  slot.held.assign(tokens.begin(), tokens.end());
  slot.busy = false;
}

// A session that cannot be reset is as unusable as a poisoned one: the job
// fails so, and the slot stays unready until a later reset succeeds. A
// snapshot that cannot be restored leaves the slot as it was (a restore
// changes nothing when it fails): the request prefills more.
Status Scheduler::prepare(Slot& slot, const std::optional<PrefixStore::Match>& from_store) {
  if (reuse_ == SlotReuse::none || !slot.ready) {
    Status reset = slot.session->reset();
    slot.ready = static_cast<bool>(reset);
    if (!reset) return reset;
  }
  if (!from_store) return {};
  if (Status restored = slot.session->restore(from_store->snapshot); !restored) {
    if (warn_) warn_("could not start from a kept prompt: " + restored.error().message());
    return {};
  }
  store_->count_hit();
  return {};
}

std::vector<GenerationOutcome> Scheduler::run(Slot& slot, Job& job,
                                              const std::optional<PrefixStore::Match>& from_store) {
  const auto abandoned = [&job] { return job.abandoned && job.abandoned(); };
  if (abandoned()) {
    return {GenerationFailure{Error(ErrorCode::contract, "the client went away before generation began"), {}}};
  }
  if (Status ready = prepare(slot, from_store); !ready) {
    GenerationFailure failure{ready.error(), {}};
    failure.partial.stop_reason = StopReason::error;
    failure.partial.poisoned = true;
    failure.partial.poison_cause = ready.error().message();
    return {failure};
  }
  auto asked = std::move(job.options.stop_requested);
  job.options.stop_requested = [this, &asked, &abandoned] {
    return cutting_.load() || abandoned() || (asked && asked());
  };
  std::vector<GenerationOutcome> outcomes;
  slot.session->begin_request();
  for (int choice = 0; choice < job.choices; ++choice) {
    outcomes.push_back(run_choice(slot, job, choice));
    if (!outcomes.back() || cutting_.load() || abandoned()) break;
  }
  slot.session->end_request();
  return outcomes;
}

// One completion. The first prefills what the slot does not hold of the
// prompt (and keeps the prompt in the store); each later one moves back to
// the prompt, which the slot holds, and samples with the next seed.
GenerationOutcome Scheduler::run_choice(Slot& slot, Job& job, int choice) {
  GenerationOptions options = job.options;
  options.reuse_held_prefix = reuse_ == SlotReuse::prefix || choice > 0;
  options.sampler.seed += static_cast<std::uint64_t>(choice);
  if (choice == 0 && keeps_prompts(slot)) {
    options.on_prefilled = [this, &slot] {
      if (slot.session->target().position() >= KvCache::kBlockPositions) keep_prompt(slot);
    };
  }
  if (job.on_choice) job.on_choice(choice);
  GenerationOutcome outcome = generate(slot.session->target(), tokenizer_, job.prompt, options, job.on_piece, warn_);
  if (outcome && outcome->stop_reason == StopReason::stopped && cutting_.load()) {
    outcome->stop_reason = StopReason::error;
    outcome = GenerationFailure{Error(ErrorCode::state, std::string(kShutdownCutMessage)), std::move(*outcome)};
  }
  if (!outcome && outcome.error().partial.poisoned) slot.ready = false;
  return outcome;
}

Result<std::vector<RankFigures>> SessionSlot::rank_figures() {
  const MaterializationReport held = session_.materialization_report();
  RankFigures rank;
  rank.layers = session_.model().config().n_layers;
  rank.weights_bytes = held.weight_shares.empty() ? 0 : held.weight_shares.front().bytes;
  rank.kv_bytes = held.kv_allocated_bytes;
  // Of a mixture of experts only: the report hashes the state as well.
  if (session_.model().config().routed()) {
    SessionReport report = session_.report();
    if (!report.expert_rows.empty()) rank.expert_rows = std::move(report.expert_rows.front());
  }
  return std::vector<RankFigures>{std::move(rank)};
}

}  // namespace accord::serve
