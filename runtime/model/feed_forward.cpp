#include "runtime/model/feed_forward.hpp"

#include <algorithm>
#include <cstddef>
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
// A batch runs expert by expert: the rows routed to an expert are gathered
// and multiplied as one product, whose kernels give each row the bits it
// would have alone, so neither the batch nor the thread count changes a
// row's result.
class RoutedFeedForward final : public FeedForward {
 public:
  RoutedFeedForward(const ModelConfig& c, cpu::ThreadPool& pool, cpu::GateActivation activation)
      : config_(c), pool_(pool), dense_(c, pool, activation) {}

  void run(const LayerWeights& w, const float* x, float* out, int batch) override {
    route(w, x, batch);
    run_experts(w, x, batch);
    combine(out, batch);
  }

 private:
  struct Choice {
    int expert = 0;
    float weight = 0.0f;
  };

  std::size_t dim() const { return static_cast<std::size_t>(config_.dim); }
  std::size_t used() const { return static_cast<std::size_t>(config_.n_experts_used); }

  // choices_[t * used .. ]: row t's experts and weights, by expert index.
  void route(const LayerWeights& w, const float* x, int batch) {
    const auto experts = static_cast<std::size_t>(config_.n_experts);
    probabilities_.resize(static_cast<std::size_t>(batch) * experts);
    cpu::matmul(pool_, probabilities_.data(), x, w.router, batch);
    choices_.resize(static_cast<std::size_t>(batch) * used());
    for (std::size_t t = 0; t < static_cast<std::size_t>(batch); ++t) {
      float* row = &probabilities_[t * experts];
      cpu::softmax_ggml(row, config_.n_experts);
      choose(row, &choices_[t * used()]);
    }
  }

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

  // expert_out_[(t * used + k) * dim ..]: the output of row t's k-th
  // chosen expert, unweighted.
  void run_experts(const LayerWeights& w, const float* x, int batch) {
    expert_out_.resize(static_cast<std::size_t>(batch) * used() * dim());
    for (int e = 0; e < config_.n_experts; ++e) {
      slots_.clear();  // (row, its choice) pairs routed to e, row by row
      for (std::size_t s = 0; s < choices_.size(); ++s) {
        if (choices_[s].expert == e) slots_.push_back(s);
      }
      if (slots_.empty()) continue;
      const int rows = static_cast<int>(slots_.size());
      inputs_.resize(slots_.size() * dim());
      for (std::size_t r = 0; r < slots_.size(); ++r) {
        std::copy_n(x + slots_[r] / used() * dim(), dim(), &inputs_[r * dim()]);
      }
      LayerWeights expert;
      expert.w1 = expert_matrix(w.w1, e, config_.n_experts);
      expert.w2 = expert_matrix(w.w2, e, config_.n_experts);
      expert.w3 = expert_matrix(w.w3, e, config_.n_experts);
      outputs_.resize(slots_.size() * dim());
      dense_.run(expert, inputs_.data(), outputs_.data(), rows);
      for (std::size_t r = 0; r < slots_.size(); ++r) {
        std::copy_n(&outputs_[r * dim()], dim(), &expert_out_[slots_[r] * dim()]);
      }
    }
  }

  // out[t] = the weighted sum of row t's experts' outputs, by expert index.
  void combine(float* out, int batch) {
    for (std::size_t t = 0; t < static_cast<std::size_t>(batch); ++t) {
      float* row = out + t * dim();
      for (std::size_t k = 0; k < used(); ++k) {
        const float weight = choices_[t * used() + k].weight;
        const float* y = &expert_out_[(t * used() + k) * dim()];
        for (std::size_t i = 0; i < dim(); ++i) row[i] = k == 0 ? y[i] * weight : row[i] + y[i] * weight;
      }
    }
  }

  ModelConfig config_;
  cpu::ThreadPool& pool_;
  DenseFeedForward dense_;                   // one expert's rows at a time
  cpu::AlignedVector<float> probabilities_;  // (batch, n_experts)
  std::vector<Choice> choices_;              // (batch, n_experts_used)
  std::vector<int> order_;                   // (n_experts)
  std::vector<std::size_t> slots_;           // indices into choices_
  cpu::AlignedVector<float> inputs_;         // (rows, dim) routed to one expert
  cpu::AlignedVector<float> outputs_;        // (rows, dim)
  cpu::AlignedVector<float> expert_out_;     // (batch * n_experts_used, dim)
};

}  // namespace

std::unique_ptr<FeedForward> make_feed_forward(const ModelConfig& config, cpu::ThreadPool& pool,
                                               cpu::GateActivation activation) {
  if (config.routed()) return std::make_unique<RoutedFeedForward>(config, pool, activation);
  return std::make_unique<DenseFeedForward>(config, pool, activation);
}

}  // namespace accord
