#include "runtime/serve/metrics.hpp"

#include <algorithm>
#include <cstdio>

namespace accord::serve {

namespace {

// Bucket bounds print as written (0.0005, not 0.00050000000000000001).
std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", value);
  return text;
}

std::string header(const std::string& name, const std::string& type, const std::string& help) {
  return "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

std::string sample(const std::string& name, std::uint64_t value) { return name + " " + std::to_string(value) + "\n"; }

std::string counter(const std::string& name, const std::string& help, std::uint64_t value) {
  return header(name, "counter", help) + sample(name, value);
}

std::string gauge(const std::string& name, const std::string& help, std::int64_t value) {
  return header(name, "gauge", help) + name + " " + std::to_string(value) + "\n";
}

}  // namespace

void Histogram::observe(double seconds) {
  const auto bucket = std::lower_bound(kBounds.begin(), kBounds.end(), seconds) - kBounds.begin();
  if (bucket < static_cast<std::ptrdiff_t>(kBounds.size())) ++buckets_[static_cast<std::size_t>(bucket)];
  ++count_;
  sum_ += seconds;
}

std::string Histogram::text(const std::string& name, const std::string& labels) const {
  const std::string prefix = labels.empty() ? "{" : "{" + labels + ",";
  std::string out;
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += buckets_[i];
    out += name + "_bucket" + prefix + "le=\"" + number(kBounds[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_bucket" + prefix + "le=\"+Inf\"} " + std::to_string(count_) + "\n";
  const std::string plain = labels.empty() ? "" : "{" + labels + "}";
  out += name + "_sum" + plain + " " + number(sum_) + "\n";
  out += name + "_count" + plain + " " + std::to_string(count_) + "\n";
  return out;
}

void Metrics::count_request(const std::string& endpoint, int http_status) {
  std::lock_guard lock(mutex_);
  ++requests_[{endpoint, http_status}];
}

void Metrics::count_generation(const GenerationCounts& counts) {
  std::lock_guard lock(mutex_);
  totals_.prompt_tokens += static_cast<std::uint64_t>(counts.prompt_tokens);
  totals_.generated_tokens += static_cast<std::uint64_t>(counts.generated_tokens);
  totals_.steps += static_cast<std::uint64_t>(counts.steps);
  totals_.aborted_steps += static_cast<std::uint64_t>(counts.aborted_steps);
  totals_.retries += static_cast<std::uint64_t>(counts.retries);
  totals_.heals += static_cast<std::uint64_t>(counts.heals);
  totals_.poisons += counts.poisoned ? 1 : 0;
  totals_.prompt_cache_tokens += static_cast<std::uint64_t>(counts.prompt_cache_tokens_reused);
  totals_.cached_prompt_tokens += static_cast<std::uint64_t>(counts.cached_prompt_tokens);
  if (counts.steps > 0) prefill_.observe(counts.prefill_seconds);
}

void Metrics::observe_decode_step(double seconds) {
  std::lock_guard lock(mutex_);
  decode_step_.observe(seconds);
}

void Metrics::observe_phase(const std::string& phase, double seconds) {
  std::lock_guard lock(mutex_);
  phase_seconds_[phase].observe(seconds);
}

void Metrics::observe_request(const std::string& endpoint, double seconds) {
  std::lock_guard lock(mutex_);
  request_seconds_[endpoint].observe(seconds);
}

void Metrics::set_load(int queued, int active, int slots) {
  std::lock_guard lock(mutex_);
  queued_ = queued;
  active_ = active;
  slots_ = slots;
}

void Metrics::set_batch_source(std::function<BatchCounts()> source) {
  std::lock_guard lock(mutex_);
  batch_source_ = std::move(source);
}

void Metrics::set_kv_pool_source(std::function<KvPoolCounts()> source) {
  std::lock_guard lock(mutex_);
  kv_pool_source_ = std::move(source);
}

void Metrics::set_prefix_store_source(std::function<PrefixStoreCounts()> source) {
  std::lock_guard lock(mutex_);
  prefix_store_source_ = std::move(source);
}

std::shared_ptr<SlotWatch> Metrics::watch_slot() {
  std::lock_guard lock(mutex_);
  auto watch = std::make_shared<SlotWatch>(
      static_cast<int>(slots_watched_.size()), [this] { changed(); },
      [this](const HealRecord& heal) { record_heal(heal); });
  slots_watched_.push_back(watch);
  return watch;
}

void Metrics::record_heal(const HealRecord& heal) {
  {
    std::lock_guard lock(mutex_);
    ++(heal.healed ? heals_healed_ : heals_failed_);
    heals_.push_back(heal);
    if (heals_.size() > kHealsKept) heals_.erase(heals_.begin());
  }
  changed();
}

void Metrics::on_change(std::function<void()> listener) {
  std::lock_guard lock(listener_mutex_);
  listener_ = std::move(listener);
}

void Metrics::changed() {
  std::lock_guard lock(listener_mutex_);
  if (listener_) listener_();
}

MetricsSnapshot Metrics::snapshot() const {
  std::lock_guard lock(mutex_);
  MetricsSnapshot s;
  s.uptime_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  s.unix_ms = unix_ms();
  s.requests = requests_;
  s.totals = totals_;
  s.queued = queued_;
  s.active = active_;
  s.slots = slots_;
  if (batch_source_) s.batches = batch_source_();
  if (kv_pool_source_) s.kv_pool = kv_pool_source_();
  if (prefix_store_source_) s.prefix_store = prefix_store_source_();
  for (const auto& watch : slots_watched_) s.slot_figures.push_back(watch->figures());
  s.heals = heals_;
  s.heals_healed = heals_healed_;
  s.heals_failed = heals_failed_;
  s.prefill = prefill_;
  s.decode_step = decode_step_;
  s.request_seconds = request_seconds_;
  s.phase_seconds = phase_seconds_;
  return s;
}

std::string Metrics::prometheus_text() const { return serve::prometheus_text(snapshot()); }

namespace {

std::string prefix_store_text(const PrefixStoreCounts& store) {
  return counter("accord_prefix_store_lookups_total", "requests that looked for their prompt's prefix in the store",
                 store.lookups) +
         counter("accord_prefix_store_hits_total",
                 "requests that started from a snapshot of the store (a longer prefix than their slot held)",
                 store.hits) +
         counter("accord_prefix_store_evictions_total", "snapshots the store let go (its bounds, or the KV pool's)",
                 store.evictions) +
         gauge("accord_prefix_store_entries", "prompt snapshots the store keeps",
               static_cast<std::int64_t>(store.entries)) +
         gauge("accord_prefix_store_bytes",
               "the KV bytes its snapshots span, each counted whole (shared blocks once per snapshot)",
               static_cast<std::int64_t>(store.bytes));
}

// Each slot's ranks: state, held bytes, experts' rows; and each slot's
// steps as they end.
std::string ranks_text(const std::vector<SlotFigures>& slots) {
  std::string states = header("accord_rank_state", "gauge",
                              "1 for the state each slot's rank is in (ready, computing, poisoned, healing), else 0");
  std::string weights = header("accord_rank_weights_bytes", "gauge", "the model's weights each rank holds in memory");
  std::string kv = header("accord_rank_kv_bytes", "gauge", "the keys and values each rank holds");
  std::string experts = header("accord_expert_rows_total", "counter",
                               "of a mixture of experts: token rows each expert computed on each rank");
  std::string steps = header("accord_slot_steps_total", "counter",
                             "each slot's forward steps as they end: committed, aborted (every rank restored) or "
                             "poisoned (a rank lost)");
  std::string tokens =
      header("accord_slot_sampled_tokens_total", "counter", "tokens each slot's committed steps sampled");
  bool routed = false;
  for (std::size_t s = 0; s < slots.size(); ++s) {
    const SlotFigures& slot = slots[s];
    const std::string of_slot = "slot=\"" + std::to_string(s) + "\"";
    for (std::size_t r = 0; r < slot.ranks.size(); ++r) {
      const std::string of_rank = of_slot + ",rank=\"" + std::to_string(r) + "\"";
      for (RankState state : kRankStates) {
        states += "accord_rank_state{" + of_rank + ",state=\"" + std::string(to_string(state)) + "\"} " +
                  (state == slot.state ? "1" : "0") + "\n";
      }
      weights += sample("accord_rank_weights_bytes{" + of_rank + "}", slot.ranks[r].weights_bytes);
      kv += sample("accord_rank_kv_bytes{" + of_rank + "}", slot.ranks[r].kv_bytes);
      const auto& rows = slot.ranks[r].expert_rows;
      for (std::size_t e = 0; e < rows.size(); ++e) {
        routed = true;
        experts += sample("accord_expert_rows_total{" + of_rank + ",expert=\"" + std::to_string(e) + "\"}", rows[e]);
      }
    }
    steps += sample("accord_slot_steps_total{" + of_slot + ",outcome=\"committed\"}", slot.committed_steps);
    steps += sample("accord_slot_steps_total{" + of_slot + ",outcome=\"aborted\"}", slot.aborted_steps);
    steps += sample("accord_slot_steps_total{" + of_slot + ",outcome=\"poisoned\"}", slot.poisoned_steps);
    tokens += sample("accord_slot_sampled_tokens_total{" + of_slot + "}", slot.sampled_tokens);
  }
  return states + weights + kv + (routed ? experts : "") + steps + tokens;
}

std::string totals_text(const GenerationTotals& totals) {
  return counter("accord_prompt_tokens_total",
                 "prompt tokens, BOS included, cached ones among them (accord_prompt_tokens_cached_total)",
                 totals.prompt_tokens) +
         counter("accord_prompt_tokens_cached_total",
                 "prompt tokens not prefilled: held by the slot from its last request, or loaded from the prompt "
                 "cache",
                 totals.cached_prompt_tokens) +
         counter("accord_generated_tokens_total", "tokens generated", totals.generated_tokens) +
         counter("accord_steps_total", "forward steps committed (prefills and decode steps)", totals.steps) +
         counter("accord_aborted_steps_total", "step attempts that aborted, every rank restored",
                 totals.aborted_steps) +
         counter("accord_retries_total", "aborted steps run again", totals.retries) +
         counter("accord_heals_total", "poisoned steps run again after the session healed", totals.heals) +
         counter("accord_poisons_total", "generations ended by a poisoned session", totals.poisons) +
         counter("accord_prompt_cache_tokens_total", "prompt tokens loaded from the prompt cache, not prefilled",
                 totals.prompt_cache_tokens);
}

std::string sources_text(const MetricsSnapshot& s) {
  std::string out;
  if (s.batches) {
    out += counter("accord_batches_total", "batched forward passes (each reads the weights once)", s.batches->batches);
    out += counter("accord_batched_steps_total", "the slots' steps run in those passes", s.batches->steps);
    out += gauge("accord_batch_widest", "the most steps one pass held", s.batches->widest);
  }
  if (s.kv_pool) {
    out += gauge("accord_kv_pool_bytes", "bytes of keys and values the slots hold (blocks in use)",
                 static_cast<std::int64_t>(s.kv_pool->used_bytes));
    out += gauge("accord_kv_pool_budget_bytes", "the KV pool's budget (--kv-budget-bytes; 0: none)",
                 static_cast<std::int64_t>(s.kv_pool->budget_bytes));
  }
  if (s.prefix_store) out += prefix_store_text(*s.prefix_store);
  return out;
}

std::string histograms_text(const MetricsSnapshot& s) {
  std::string out =
      header("accord_prefill_seconds", "histogram", "time of a prompt's prefill phase, prompt cache included");
  out += s.prefill.text("accord_prefill_seconds", "");
  out += header("accord_decode_step_seconds", "histogram", "time of one decode step, its transaction included");
  out += s.decode_step.text("accord_decode_step_seconds", "");
  out += header("accord_request_seconds", "histogram", "time from a request read to its last byte queued");
  for (const auto& [endpoint, histogram] : s.request_seconds) {
    out += histogram.text("accord_request_seconds", "endpoint=\"" + endpoint + "\"");
  }
  if (!s.phase_seconds.empty()) {
    out += header("accord_phase_seconds", "histogram", "a transaction phase's local work on a rank, by phase");
  }
  for (const auto& [phase, histogram] : s.phase_seconds) {
    out += histogram.text("accord_phase_seconds", "phase=\"" + phase + "\"");
  }
  return out;
}

}  // namespace

std::string prometheus_text(const MetricsSnapshot& s) {
  std::string out = header("accord_requests_total", "counter", "HTTP requests answered, by endpoint and status");
  for (const auto& [key, count] : s.requests) {
    out += "accord_requests_total{endpoint=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " +
           std::to_string(count) + "\n";
  }
  out += totals_text(s.totals);
  out += gauge("accord_queued_requests", "requests waiting for a slot", s.queued);
  out += gauge("accord_active_requests", "requests generating", s.active);
  out += gauge("accord_slots", "sequences generated at once (--parallel)", s.slots);
  out += sources_text(s);
  if (!s.slot_figures.empty()) out += ranks_text(s.slot_figures);
  out += header("accord_heal_attempts_total", "counter", "heals of a poisoned session as they end, by result");
  out += sample("accord_heal_attempts_total{result=\"healed\"}", s.heals_healed);
  out += sample("accord_heal_attempts_total{result=\"failed\"}", s.heals_failed);
  out += histograms_text(s);
  return out;
}

}  // namespace accord::serve
