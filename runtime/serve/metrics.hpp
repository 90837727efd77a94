// What `accord serve` counts, written as Prometheus text for /metrics.
// Every method may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>

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

  std::string prometheus_text() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;
  std::uint64_t prompt_tokens_ = 0;
  std::uint64_t generated_tokens_ = 0;
  std::uint64_t steps_ = 0;
  std::uint64_t aborted_steps_ = 0;
  std::uint64_t retries_ = 0;
  std::uint64_t heals_ = 0;
  std::uint64_t poisons_ = 0;
  std::uint64_t prompt_cache_tokens_ = 0;
  std::uint64_t cached_prompt_tokens_ = 0;
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
};

}  // namespace accord::serve
