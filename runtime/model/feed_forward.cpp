#include "runtime/model/feed_forward.hpp"

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "kernels/cpu/aligned.hpp"
#include "kernels/cpu/ops.hpp"
#include "runtime/model/weights.hpp"

namespace accord {

namespace {

// w2(act(w1 x) * w3 x).
class DenseFeedForward final : public FeedForward {
 public:
  DenseFeedForward(const ModelConfig& c, cpu::ThreadPool& pool, cpu::GateActivation activation)
      : hidden_dim_(c.hidden_dim), pool_(pool), activation_(activation) {}

  void run(const LayerWeights& w, const float* x, float* out, int batch) override {
    const std::size_t size = static_cast<std::size_t>(batch) * static_cast<std::size_t>(hidden_dim_);
    gate_.resize(size);
    up_.resize(size);
    cpu::gated_matmul(pool_, gate_.data(), up_.data(), x, batch, w.w1, w.w3, activation_);
    cpu::matmul(pool_, out, gate_.data(), w.w2, batch);
  }

 private:
  int hidden_dim_;
  cpu::ThreadPool& pool_;
  cpu::GateActivation activation_;
  cpu::AlignedVector<float> gate_;  // (batch, hidden_dim)
  cpu::AlignedVector<float> up_;    // (batch, hidden_dim)
};

// Expert `expert`'s matrix in a stack of `experts` (LayerWeights' routed w1,
// w2, w3): its rows, a view where they lie.
cpu::Matrix expert_matrix(const cpu::Matrix& stack, int expert, int experts) {
  const int rows = stack.rows / experts;
  return {stack.type, stack.row(expert * rows), rows, stack.cols};
}

// A mixture of experts as llama.cpp's build_moe_ffn computes it for Mixtral
// and Qwen 3 MoE: the router's logits, their softmax over every expert
// (softmax_ggml), the n_experts_used most probable experts (ties to the
// lower index), their probabilities divided by their sum (in double, in
// that order, rounded to float); each chosen expert's SwiGLU of the row
// times its weight, the products rounded to float and added in the order
// of the experts' indices. llama.cpp adds them in its top-k's order: the
// same bits for two experts (float addition commutes), the zoo's files.
//
// A batch runs grouped by expert: the rows routed to each expert are
// gathered, one expert's after another's, and each expert's are multiplied
// as one product of that slice, every expert's in one pass of the pool
// (gated_matmul_slices, then matmul_slices). The kernels give each row the
// bits it would have alone, so neither the batch, the thread count nor the
// rank that holds the expert changes a row's result.
class RoutedFeedForward final : public ExpertMixture {
 public:
  RoutedFeedForward(const ModelConfig& c, cpu::ThreadPool& pool, cpu::GateActivation activation)
      : config_(c), pool_(pool), activation_(activation), rows_by_expert_(static_cast<std::size_t>(c.n_experts)) {}

  void run(const LayerWeights& w, const float* x, float* out, int batch) override {
    route(w, x, batch);
    run_held(
        w, x, [](int) { return 0; }, 0);
    combine(out);
  }

  // choices_[t * used .. ]: row t's experts and weights, by expert index.
  void route(const LayerWeights& w, const float* x, int batch) override {
    const auto experts = static_cast<std::size_t>(config_.n_experts);
    batch_ = batch;
    probabilities_.resize(static_cast<std::size_t>(batch) * experts);
    cpu::matmul(pool_, probabilities_.data(), x, w.router, batch);
    choices_.resize(static_cast<std::size_t>(batch) * used());
    for (std::size_t t = 0; t < static_cast<std::size_t>(batch); ++t) {
      float* row = &probabilities_[t * experts];
      cpu::softmax_ggml(row, config_.n_experts);
      choose(row, &choices_[t * used()]);
    }
    expert_out_.resize(choices_.size() * dim());
  }

  void run_held(const LayerWeights& w, const float* x, const ExpertHolder& holder, int self) override {
    slot_experts_.clear();
    slot_rows_.clear();
    slot_out_.clear();
    for (std::size_t s = 0; s < choices_.size(); ++s) {
      if (holder(choices_[s].expert) != self) continue;
      slot_experts_.push_back(choices_[s].expert);
      slot_rows_.push_back(x + s / used() * dim());
      slot_out_.push_back(&expert_out_[s * dim()]);
    }
    run_expert_rows(w);
  }

  std::map<int, ExpertRequest> requests(const float* x, const ExpertHolder& holder, int self) const override {
    std::map<int, ExpertRequest> by_rank;
    for (std::size_t s = 0; s < choices_.size(); ++s) {
      const int rank = holder(choices_[s].expert);
      if (rank == self) continue;
      ExpertRequest& request = by_rank[rank];
      request.experts.push_back(choices_[s].expert);
      const float* row = x + s / used() * dim();
      request.rows.insert(request.rows.end(), row, row + dim());
    }
    return by_rank;
  }

  Status accept(const ExpertHolder& holder, int rank, std::span<const float> outputs) override {
    std::size_t slots = 0;
    for (const Choice& choice : choices_) slots += holder(choice.expert) == rank ? 1 : 0;
    if (outputs.size() != slots * dim()) {
      return Error(ErrorCode::contract, "rank " + std::to_string(rank) + " sent " + std::to_string(outputs.size()) +
                                            " values of expert outputs; " + std::to_string(slots) + " rows of " +
                                            std::to_string(dim()) + " were asked for");
    }
    const float* next = outputs.data();
    for (std::size_t s = 0; s < choices_.size(); ++s) {
      if (holder(choices_[s].expert) != rank) continue;
      std::copy_n(next, dim(), &expert_out_[s * dim()]);
      next += dim();
    }
    return {};
  }

  // out[t] = the weighted sum of row t's experts' outputs, by expert index.
  void combine(float* out) override {
    for (std::size_t t = 0; t < static_cast<std::size_t>(batch_); ++t) {
      float* row = out + t * dim();
      for (std::size_t k = 0; k < used(); ++k) {
        const float weight = choices_[t * used() + k].weight;
        const float* y = &expert_out_[(t * used() + k) * dim()];
        for (std::size_t i = 0; i < dim(); ++i) row[i] = k == 0 ? y[i] * weight : row[i] + y[i] * weight;
      }
    }
  }

  void run_slots(const LayerWeights& w, std::span<const int> experts, const float* rows, float* out) override {
    slot_experts_.assign(experts.begin(), experts.end());
    slot_rows_.clear();
    slot_out_.clear();
    for (std::size_t s = 0; s < experts.size(); ++s) {
      slot_rows_.push_back(rows + s * dim());
      slot_out_.push_back(out + s * dim());
    }
    run_expert_rows(w);
  }

  std::span<const std::uint64_t> rows_by_expert() const override { return rows_by_expert_; }

 private:
  struct Choice {
    int expert = 0;
    float weight = 0.0f;
  };

  std::size_t dim() const { return static_cast<std::size_t>(config_.dim); }
  std::size_t used() const { return static_cast<std::size_t>(config_.n_experts_used); }

  // The most probable experts of `probabilities` (n_experts) into
  // `chosen` (n_experts_used), their weights normalized.
  void choose(const float* probabilities, Choice* chosen) {
    order_.resize(static_cast<std::size_t>(config_.n_experts));
    for (std::size_t e = 0; e < order_.size(); ++e) order_[e] = static_cast<int>(e);
    const auto top = order_.begin() + static_cast<std::ptrdiff_t>(used());
    std::partial_sort(order_.begin(), top, order_.end(), [&](int a, int b) {
      return probabilities[a] > probabilities[b] || (probabilities[a] == probabilities[b] && a < b);
    });
    double sum = 0.0;
    for (std::size_t k = 0; k < used(); ++k) sum += static_cast<double>(probabilities[order_[k]]);
    const auto total = static_cast<float>(sum);
    for (std::size_t k = 0; k < used(); ++k) chosen[k] = {order_[k], probabilities[order_[k]] / total};
    std::sort(chosen, chosen + used(), [](const Choice& a, const Choice& b) { return a.expert < b.expert; });
  }

  // *slot_out_[i] = expert slot_experts_[i]'s output for *slot_rows_[i]:
  // the slots gathered by expert, each expert's a slice of one batch.
  void run_expert_rows(const LayerWeights& w) {
    group_by_expert(w);
    if (picked_.empty()) return;
    const auto rows = picked_.size();
    const auto hidden = static_cast<std::size_t>(config_.hidden_dim);
    inputs_.resize(rows * dim());
    for (std::size_t r = 0; r < rows; ++r) std::copy_n(slot_rows_[picked_[r]], dim(), &inputs_[r * dim()]);
    hidden_.resize(rows * hidden);
    up_.resize(rows * hidden);
    outputs_.resize(rows * dim());
    gated_.clear();
    down_.clear();
    for (const Group& g : groups_) {
      const auto first = static_cast<std::size_t>(g.slice.first_token);
      gated_.push_back({g.slice, &g.w1, &g.w3, &hidden_[first * hidden], &up_[first * hidden]});
      down_.push_back({g.slice, &g.w2, &outputs_[first * dim()]});
    }
    const int batch = static_cast<int>(rows);
    cpu::gated_matmul_slices(pool_, inputs_.data(), batch, config_.dim, gated_, activation_);
    cpu::matmul_slices(pool_, hidden_.data(), batch, config_.hidden_dim, down_);
    for (std::size_t r = 0; r < rows; ++r) std::copy_n(&outputs_[r * dim()], dim(), slot_out_[picked_[r]]);
  }

  // picked_: the slots in the order of their experts (by slot within
  // one); groups_: each expert's slice of them, with its matrices.
  void group_by_expert(const LayerWeights& w) {
    picked_.clear();
    groups_.clear();
    for (int e = 0; e < config_.n_experts; ++e) {
      const std::size_t first = picked_.size();
      for (std::size_t i = 0; i < slot_experts_.size(); ++i) {
        if (slot_experts_[i] == e) picked_.push_back(i);
      }
      const std::size_t count = picked_.size() - first;
      if (count == 0) continue;
      rows_by_expert_[static_cast<std::size_t>(e)] += count;
      groups_.push_back({{static_cast<int>(first), static_cast<int>(count)},
                         expert_matrix(w.w1, e, config_.n_experts),
                         expert_matrix(w.w2, e, config_.n_experts),
                         expert_matrix(w.w3, e, config_.n_experts)});
    }
  }

  // One expert's slice of the gathered rows, and its matrices.
  struct Group {
    cpu::TokenSlice slice;
    cpu::Matrix w1, w2, w3;
  };

  ModelConfig config_;
  cpu::ThreadPool& pool_;
  cpu::GateActivation activation_;
  int batch_ = 0;                            // rows of the routed batch
  cpu::AlignedVector<float> probabilities_;  // (batch, n_experts)
  std::vector<Choice> choices_;              // (batch, n_experts_used)
  std::vector<int> order_;                   // (n_experts)
  cpu::AlignedVector<float> expert_out_;     // (batch * n_experts_used, dim): each choice's output, unweighted
  // The slots run_expert_rows computes: expert, input row, output row.
  std::vector<int> slot_experts_;
  std::vector<const float*> slot_rows_;
  std::vector<float*> slot_out_;
  std::vector<std::uint64_t> rows_by_expert_;
  std::vector<std::size_t> picked_;  // indices into the slots, by expert
  std::vector<Group> groups_;
  std::vector<cpu::GatedSlice> gated_;
  std::vector<cpu::SliceProduct> down_;
  cpu::AlignedVector<float> inputs_;   // (rows, dim): the picked slots' rows
  cpu::AlignedVector<float> hidden_;   // (rows, hidden_dim)
  cpu::AlignedVector<float> up_;       // (rows, hidden_dim)
  cpu::AlignedVector<float> outputs_;  // (rows, dim)
};

}  // namespace

std::unique_ptr<FeedForward> make_feed_forward(const ModelConfig& config, cpu::ThreadPool& pool,
                                               cpu::GateActivation activation) {
  if (config.routed()) return std::make_unique<RoutedFeedForward>(config, pool, activation);
  return std::make_unique<DenseFeedForward>(config, pool, activation);
}

}  // namespace accord
