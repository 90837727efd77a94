// The feed-forward of a block, chosen once per model from its architecture
// (docs/models.md): dense, or routed through a mixture of experts. Both
// take the same normed rows and give the same shape of output, so the
// forward pass, the session above it and its state never tell them apart.
#pragma once

#include <memory>

#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/thread_pool.hpp"
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

// The feed-forward of a model shaped like `config`: a routed one when it
// has experts. `activation`: the gate's, as the forward pass computes it.
// The pool must outlive it.
std::unique_ptr<FeedForward> make_feed_forward(const ModelConfig& config, cpu::ThreadPool& pool,
                                               cpu::GateActivation activation);

}  // namespace accord
