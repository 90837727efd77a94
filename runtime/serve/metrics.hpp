// What `accord serve` counts, taken as one MetricsSnapshot, from which
// /metrics (Prometheus text) and the status page's events
// (status_feed.hpp) are both written. Every method may be called from any
// thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/serve/cluster_status.hpp"

namespace accord::serve {

// A latency histogram in seconds, with fixed bucket bounds.
class Histogram {
 public:
  // From 10 µs: a transaction phase's local work can take that little.
  static constexpr std::array<double, 16> kBounds{0.00001, 0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                  0.05,    0.1,    0.25,   0.5,   1,      2.5,   5,    10};
  void observe(double seconds);
  // The text of one series: NAME_bucket{LABELS,le=...}, NAME_sum, NAME_count.
  std::string text(const std::string& name, const std::string& labels) const;

 private:
  std::array<std::uint64_t, kBounds.size()> buckets_{};  // not cumulative
  std::uint64_t count_ = 0;
  double sum_ = 0;
};

// What one finished generation adds.
struct GenerationCounts {
  int prompt_tokens = 0;
  int generated_tokens = 0;
  int steps = 0;  // forward steps committed: the prefill and each decode
  int aborted_steps = 0;
  int retries = 0;
  int heals = 0;
  bool poisoned = false;
  double prefill_seconds = 0;
  int prompt_cache_tokens_reused = 0;
  int cached_prompt_tokens = 0;  // not prefilled: held by the slot, or from the prompt cache
};

// What the slots' batched steps came to (StepBatcher::Stats).
struct BatchCounts {
  std::uint64_t batches = 0;
  std::uint64_t steps = 0;
  int widest = 0;
};

// What the prefix store (prefix_store.hpp) has done and holds.
struct PrefixStoreCounts {
  std::uint64_t lookups = 0;
  std::uint64_t hits = 0;  // lookups whose snapshot a slot restored
  std::uint64_t evictions = 0;
  std::uint64_t entries = 0;
  std::uint64_t bytes = 0;  // as its byte bound counts them: each entry's whole blocks
};

// What the finished generations came to (GenerationCounts, summed).
struct GenerationTotals {
  std::uint64_t prompt_tokens = 0;
  std::uint64_t cached_prompt_tokens = 0;
  std::uint64_t generated_tokens = 0;
  std::uint64_t steps = 0;
  std::uint64_t aborted_steps = 0;
  std::uint64_t retries = 0;
  std::uint64_t heals = 0;
  std::uint64_t poisons = 0;
  std::uint64_t prompt_cache_tokens = 0;
};

struct MetricsSnapshot;

class Metrics {
 public:
  // Asked for the batch counts whenever the metrics are written.
  void set_batch_source(std::function<BatchCounts()> source);
  // The KV pool single-rank slots share (kv_pool.hpp): its bytes in use
  // and its budget (0: none), asked for whenever the metrics are written.
  struct KvPoolCounts {
    std::uint64_t used_bytes = 0;
    std::uint64_t budget_bytes = 0;
  };
  void set_kv_pool_source(std::function<KvPoolCounts()> source);
  // Asked for the prefix store's counts whenever the metrics are written.
  void set_prefix_store_source(std::function<PrefixStoreCounts()> source);
  void count_request(const std::string& endpoint, int http_status);
  void count_generation(const GenerationCounts& counts);
  void observe_decode_step(double seconds);
  // A transaction phase's local work on a rank (runtime/engine/rank_participant.hpp).
  void observe_phase(const std::string& phase, double seconds);
  void observe_request(const std::string& endpoint, double seconds);
  void set_load(int queued, int active, int slots);
  // The watch of the next slot (numbered from 0), which the slot's
  // WatchedSlot tells and every snapshot reads. Heals it records are kept.
  std::shared_ptr<SlotWatch> watch_slot();
  // Called (from a slot's thread, never under the caller's locks) when a
  // slot turns poisoned or healing or back, or a heal ends; empty: none.
  // Once it returns, the listener it replaced is not running.
  void on_change(std::function<void()> listener);

  MetricsSnapshot snapshot() const;
  std::string prometheus_text() const;

  static constexpr std::size_t kHealsKept = 32;

 private:
  void record_heal(const HealRecord& heal);
  void changed();

  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;
  GenerationTotals totals_;
  Histogram prefill_;
  Histogram decode_step_;
  std::map<std::string, Histogram> request_seconds_;
  std::map<std::string, Histogram> phase_seconds_;
  int queued_ = 0;
  int active_ = 0;
  int slots_ = 0;
  std::function<BatchCounts()> batch_source_;
  std::function<KvPoolCounts()> kv_pool_source_;
  std::function<PrefixStoreCounts()> prefix_store_source_;
  std::vector<std::shared_ptr<SlotWatch>> slots_watched_;
  std::vector<HealRecord> heals_;  // the last kHealsKept, oldest first
  std::uint64_t heals_healed_ = 0;
  std::uint64_t heals_failed_ = 0;
  std::mutex listener_mutex_;
  std::function<void()> listener_;  // guarded by listener_mutex_
};

// Everything Metrics holds and its sources give, at one moment.
struct MetricsSnapshot {
  double uptime_seconds = 0;
  std::int64_t unix_ms = 0;
  std::map<std::pair<std::string, int>, std::uint64_t> requests;  // by endpoint and HTTP status
  GenerationTotals totals;
  int queued = 0;
  int active = 0;
  int slots = 0;
  std::optional<BatchCounts> batches;
  std::optional<Metrics::KvPoolCounts> kv_pool;
  std::optional<PrefixStoreCounts> prefix_store;
  std::vector<SlotFigures> slot_figures;  // by slot
  std::vector<HealRecord> heals;          // the last Metrics::kHealsKept, oldest first
  std::uint64_t heals_healed = 0;         // every heal recorded, not only those kept
  std::uint64_t heals_failed = 0;
  Histogram prefill;
  Histogram decode_step;
  std::map<std::string, Histogram> request_seconds;
  std::map<std::string, Histogram> phase_seconds;
};

// The snapshot as Prometheus text.
std::string prometheus_text(const MetricsSnapshot& snapshot);

}  // namespace accord::serve
