// The Llama forward pass on one CUDA device (issue 18): the weights and one
// sequence's keys and values resident in device memory, the kernels of
// kernels/cuda. It computes what Transformer::forward computes, within a
// tolerance (the order of each reduction differs), and is what
// `accord-cuda-check` compares with the CPU. It is not yet a rank's
// executor: the session's checkpoints, digests and rollback still read the
// CPU's KvCache (docs/gpu.md, "What remains").
//
// Plain C++: callers need no CUDA header. Only built where nvcc exists.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "runtime/error.hpp"
#include "runtime/model/model.hpp"

namespace accord {

class CudaTransformer {
 public:
  // Copies model's weights to `device`. An error, and nothing held, when
  // there is no such device, its memory is too small, or a weight's type has
  // no CUDA kernel (Q4_0).
  static Result<std::unique_ptr<CudaTransformer>> create(const Model& model, int device);
  ~CudaTransformer();
  CudaTransformer(const CudaTransformer&) = delete;
  CudaTransformer& operator=(const CudaTransformer&) = delete;

  // As Transformer::forward: tokens at positions pos, pos + 1, ..., their
  // keys and values into the device's cache; the logits of the last token,
  // valid until the next call. A failed check changes nothing.
  Result<std::span<const float>> forward(std::span<const int> tokens, int pos);

  // The weights' bytes on the device: what a decode step reads.
  std::size_t weight_bytes() const;

 private:
  struct Impl;
  explicit CudaTransformer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace accord
