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
  prompt_tokens_ += static_cast<std::uint64_t>(counts.prompt_tokens);
  generated_tokens_ += static_cast<std::uint64_t>(counts.generated_tokens);
  steps_ += static_cast<std::uint64_t>(counts.steps);
  aborted_steps_ += static_cast<std::uint64_t>(counts.aborted_steps);
  retries_ += static_cast<std::uint64_t>(counts.retries);
  heals_ += static_cast<std::uint64_t>(counts.heals);
  poisons_ += counts.poisoned ? 1 : 0;
  prompt_cache_tokens_ += static_cast<std::uint64_t>(counts.prompt_cache_tokens_reused);
  cached_prompt_tokens_ += static_cast<std::uint64_t>(counts.cached_prompt_tokens);
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

}  // namespace

std::string Metrics::prometheus_text() const {
  std::lock_guard lock(mutex_);
  std::string out = header("accord_requests_total", "counter", "HTTP requests answered, by endpoint and status");
  for (const auto& [key, count] : requests_) {
    out += "accord_requests_total{endpoint=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " +
           std::to_string(count) + "\n";
  }
  out += counter("accord_prompt_tokens_total",
                 "prompt tokens, BOS included, cached ones among them (accord_prompt_tokens_cached_total)",
                 prompt_tokens_);
  out += counter("accord_prompt_tokens_cached_total",
                 "prompt tokens not prefilled: held by the slot from its last request, or loaded from the prompt cache",
                 cached_prompt_tokens_);
  out += counter("accord_generated_tokens_total", "tokens generated", generated_tokens_);
  out += counter("accord_steps_total", "forward steps committed (prefills and decode steps)", steps_);
  out += counter("accord_aborted_steps_total", "step attempts that aborted, every rank restored", aborted_steps_);
  out += counter("accord_retries_total", "aborted steps run again", retries_);
  out += counter("accord_heals_total", "poisoned steps run again after the session healed", heals_);
  out += counter("accord_poisons_total", "generations ended by a poisoned session", poisons_);
  out += counter("accord_prompt_cache_tokens_total", "prompt tokens loaded from the prompt cache, not prefilled",
                 prompt_cache_tokens_);
  out += gauge("accord_queued_requests", "requests waiting for a slot", queued_);
  out += gauge("accord_active_requests", "requests generating", active_);
  out += gauge("accord_slots", "sequences generated at once (--parallel)", slots_);
  if (batch_source_) {
    const BatchCounts batches = batch_source_();
    out += counter("accord_batches_total", "batched forward passes (each reads the weights once)", batches.batches);
    out += counter("accord_batched_steps_total", "the slots' steps run in those passes", batches.steps);
    out += gauge("accord_batch_widest", "the most steps one pass held", batches.widest);
  }
  if (kv_pool_source_) {
    const KvPoolCounts pool = kv_pool_source_();
    out += gauge("accord_kv_pool_bytes", "bytes of keys and values the slots hold (blocks in use)",
                 static_cast<std::int64_t>(pool.used_bytes));
    out += gauge("accord_kv_pool_budget_bytes", "the KV pool's budget (--kv-budget-bytes; 0: none)",
                 static_cast<std::int64_t>(pool.budget_bytes));
  }
  if (prefix_store_source_) out += prefix_store_text(prefix_store_source_());
  out += header("accord_prefill_seconds", "histogram", "time of a prompt's prefill phase, prompt cache included");
  out += prefill_.text("accord_prefill_seconds", "");
  out += header("accord_decode_step_seconds", "histogram", "time of one decode step, its transaction included");
  out += decode_step_.text("accord_decode_step_seconds", "");
  out += header("accord_request_seconds", "histogram", "time from a request read to its last byte queued");
  for (const auto& [endpoint, histogram] : request_seconds_) {
    out += histogram.text("accord_request_seconds", "endpoint=\"" + endpoint + "\"");
  }
  if (!phase_seconds_.empty()) {
    out += header("accord_phase_seconds", "histogram", "a transaction phase's local work on a rank, by phase");
  }
  for (const auto& [phase, histogram] : phase_seconds_) {
    out += histogram.text("accord_phase_seconds", "phase=\"" + phase + "\"");
  }
  return out;
}

}  // namespace accord::serve
