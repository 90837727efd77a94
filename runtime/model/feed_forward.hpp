// The feed-forward of a block, chosen once per model from its architecture
// (docs/models.md): dense, or routed through a mixture of experts. Both
// take the same normed rows and give the same shape of output, so the
// forward pass, the session above it and its state never tell them apart.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/base/error.hpp"
#include "runtime/model/model.hpp"

namespace accord {

struct LayerWeights;

class FeedForward {
 public:
  virtual ~FeedForward() = default;
  // out = the feed-forward of `batch` normed rows x; out may be x. Each
  // row's bits depend on that row alone, neither on the batch nor on the
  // pool's threads.  x, out: (batch, dim)
  virtual void run(const LayerWeights& w, const float* x, float* out, int batch) = 0;
};

// The rows a routed block sends one rank that holds some of its experts
// (expert parallelism, docs/models.md): for each slot, a chosen expert and
// the normed row it runs on. What comes back is one output row per slot,
// in the same order.
struct ExpertRequest {
  std::vector<int> experts;  // (slots)
  std::vector<float> rows;   // (slots, dim)
};

// Which rank holds expert `expert` of the block being run.
using ExpertHolder = std::function<int(int expert)>;

// A mixture of experts, whole or split over ranks around an exchange of
// rows: route, run_held, requests, accept what the other ranks computed,
// combine. run() is all of it on one rank.
class ExpertMixture : public FeedForward {
 public:
  // Chooses each row's experts. x: (batch, dim), kept by the caller until
  // run_held has run.
  virtual void route(const LayerWeights& w, const float* x, int batch) = 0;
  // Runs the chosen experts that `holder` says `self` holds.
  virtual void run_held(const LayerWeights& w, const float* x, const ExpertHolder& holder, int self) = 0;
  // The rows routed to experts other ranks hold, by rank.
  virtual std::map<int, ExpertRequest> requests(const float* x, const ExpertHolder& holder, int self) const = 0;
  // Rank `rank`'s outputs for requests()[rank], (slots, dim).
  virtual Status accept(const ExpertHolder& holder, int rank, std::span<const float> outputs) = 0;
  // out = the weighted sum of each row's experts' outputs.
  virtual void combine(float* out) = 0;
  // For another rank's block: out = each slot's expert's output for its
  // row, unweighted; an expert's rows run as one product, experts in index
  // order, so a row gets the bits it would get where it was routed.
  // rows, out: (slots, dim).
  virtual void run_slots(const LayerWeights& w, std::span<const int> experts, const float* rows, float* out) = 0;
  // The rows each expert computed here so far, over every block (n_experts).
  virtual std::span<const std::uint64_t> rows_by_expert() const = 0;
};

// The feed-forward of a model shaped like `config`: a routed one when it
// has experts. `activation`: the gate's, as the forward pass computes it.
// The pool must outlive it.
std::unique_ptr<FeedForward> make_feed_forward(const ModelConfig& config, cpu::ThreadPool& pool,
                                               cpu::GateActivation activation);

}  // namespace accord
