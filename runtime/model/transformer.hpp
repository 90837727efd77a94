// The forward pass of a decoder (architecture.hpp: Llama, Qwen 2 and 3,
// Gemma 3, Phi-3) over a Model, on the CPU kernels.
//
// A Transformer holds scratch buffers and the RoPE tables; the weights stay
// in the Model and the keys/values in a caller-owned KvCache. One forward
// call at a time (the scratch is shared); the thread pool is the rank's.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "kernels/cpu/aligned.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/ops.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/base/error.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/model.hpp"

namespace accord {

class ExpertMixture;
class FeedForward;
class WeightResidency;
struct ExpertRequest;
struct RowSpan;

// cos and sin of the RoPE angles of positions [0, positions): (positions,
// head_size / 2) each. Grown as steps reach further, so that a long
// context costs a session only what it uses.
struct RopeTables {
  int positions = 0;
  std::vector<float> cos;
  std::vector<float> sin;
};

// Checks that every id is in the vocabulary and that positions
// [pos, pos + tokens.size()) fit the context. Contract error otherwise.
Status check_tokens(const ModelConfig& config, std::span<const int> tokens, int pos);

class Transformer {
 public:
  // model and pool must outlive the Transformer.
  Transformer(const Model& model, cpu::ThreadPool& pool);
  ~Transformer();

  const Model& model() const { return model_; }

  // check_tokens for this model.
  Status check_input(std::span<const int> tokens, int pos) const { return check_tokens(model_.config(), tokens, pos); }

  // One sequence's part of a batch of several (continuous batching): its
  // tokens at positions pos, pos + 1, ..., against its own KV cache, which
  // must hold every unit. all_rows: logits for every token, not the last.
  struct Lane {
    std::span<const int> tokens;
    int pos = 0;
    KvCache* kv = nullptr;
    bool all_rows = false;
  };

  // Runs `tokens` at positions pos, pos + 1, ... as one batch, appending
  // their keys and values to kv (which must hold every unit), and returns
  // the logits of the last token: (vocab). The span stays valid until the
  // next call. On a failed check nothing, kv included, is changed.
  Result<std::span<const float>> forward(std::span<const int> tokens, int pos, KvCache& kv);
  // Runs several sequences' lanes as one batch: the weights are read once
  // for all their rows, while each lane writes and attends to its own cache
  // only. Every row computes exactly as it would alone (the kernels'
  // results do not depend on the batch), so a lane's logits and keys equal
  // those of forward() on its own. Returns the logits the lanes asked for,
  // lane after lane: (rows, vocab); hidden() then holds every row's final
  // residual stream, lane after lane. Lanes must have passed check_input,
  // and their caches must have room for their positions (KvStore::reserve).
  // `after_unit`, when set, is told how many units have run after each.
  std::span<float> forward_lanes(std::span<const Lane> lanes,
                                 const std::function<void(int units_done)>& after_unit = {});

  // The same pass one stage at a time, for callers that look between units
  // (observers, pipeline ranks). Inputs must have passed check_input.
  void embed(std::span<const int> tokens);        // starts a batch
  void load_hidden(std::span<const float> rows);  // starts a batch from (rows, dim) activations
  void run_unit(int unit, int pos, KvCache& kv);  // kv must hold `unit`, with room for the positions
  std::span<float> hidden();                      // (batch, dim) residual stream

  // Expert parallelism (runtime/rank/expert_placement.hpp): a routed unit
  // run in two halves around the exchange of rows with the ranks that hold
  // its other experts. begin_unit runs attention, the router and the
  // experts `holder` says are `self`'s, and returns the rows for the
  // others, by rank; accept_experts takes one rank's outputs back; then
  // finish_unit combines them into the residual stream.
  std::map<int, ExpertRequest> begin_unit(int unit, int pos, KvCache& kv, const std::function<int(int)>& holder,
                                          int self);
  Status accept_experts(const std::function<int(int)>& holder, int rank, std::span<const float> outputs);
  void finish_unit(int unit);
  // Another rank's rows for experts of `unit` held here: out = each
  // slot's expert's output, (slots, dim). Leaves the residual stream as it is.
  void serve_experts(int unit, std::span<const int> experts, std::span<const float> rows, std::vector<float>& out);
  // Of a mixture of experts: the rows each expert computed here so far,
  // over every block; empty for a dense model.
  std::vector<std::uint64_t> expert_rows() const;

  enum class Rows { last, all };
  std::span<float> head(Rows rows);  // (rows, vocab) logits, valid until the next call
  int batch() const { return batch_; }

  // From now on the steps tell `residency` (which must outlive the
  // Transformer, or be replaced) which weights they use; nullptr: none.
  void set_residency(WeightResidency* residency) { residency_ = residency; }

 private:
  // Where a lane's rows sit in the batch.
  struct LaneRows {
    int first_row = 0;
    int rows = 0;
    int pos = 0;
    KvCache* kv = nullptr;
  };

  void resize_scratch(int batch);
  // Grows the RoPE tables to hold positions [0, end).
  void cover_positions(int end);
  void run_lanes_unit(int unit);
  void compute_unit(int unit);
  void attend(int unit);
  void position_row(int unit, std::size_t t, int pos);
  void feed_forward(int unit);
  // feed_forward's halves: the residual and the norm before the
  // feed-forward, and what follows it.
  void normalize_for_feed_forward(int unit);
  void add_feed_forward(int unit);
  // Logits of the batch rows `rows`, after the final norm.
  std::span<float> classify(std::span<const int> rows);
  // Logits of `count` normed rows against the classifier's `rows` (a part
  // the residency streams).
  void classify_rows(RowSpan rows, int count);

  const Model& model_;
  cpu::ThreadPool& pool_;
  RopeTables rope_;
  RopeTables sliding_rope_;  // of the sliding-window layers' base; empty when none slides
  bool slides_ = false;      // some layer has a sliding window
  // llama2.c's arithmetic or ggml's (transformer.cpp, llama2c_arithmetic).
  cpu::NormSum norm_sum_ = cpu::NormSum::in_float;
  std::unique_ptr<FeedForward> feed_forward_;  // dense or routed (feed_forward.hpp)
  ExpertMixture* mixture_ = nullptr;           // feed_forward_, when routed

  // Activations for a batch of B tokens, aligned to cache lines for the
  // kernels' vector loads.
  cpu::AlignedVector<float> x_;            // (B, dim) residual stream
  cpu::AlignedVector<float> xb_;           // (B, max(dim, q_dim)) normed input / attention output
  cpu::AlignedVector<float> xb2_;          // (B, dim) projection output
  cpu::AlignedVector<float> q_;            // (B, q_dim) queries
  cpu::AlignedVector<float> k_;            // (B, kv_dim) keys, before they go to their lane's cache
  cpu::AlignedVector<float> v_;            // (B, kv_dim) values, likewise
  cpu::AlignedVector<float> logits_;       // (rows, vocab)
  cpu::AlignedVector<float> part_logits_;  // (rows, part's rows), under a residency
  int batch_ = 0;
  std::vector<LaneRows> lanes_;  // of the batch being run
  std::vector<int> head_rows_;
  WeightResidency* residency_ = nullptr;
};

}  // namespace accord
