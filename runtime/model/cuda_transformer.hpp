// The CUDA backend of the seam in stage_backend.hpp (docs/gpu.md): a rank's
// share of the Llama forward pass on one device, its weights and its keys
// and values resident there, the kernels of kernels/cuda. It computes what
// the CPU stage computes within a tolerance (the order of each reduction
// differs), so a session on it is deterministic on its device but not bit
// for bit the CPU's.
//
// The KvStore copies rows between the device and the host, so the
// session's checkpoints, digests, rollback and prompt cache work on device
// memory. A CUDA failure throws cuda::CudaFailure out of the StageBackend
// calls; the phase guard (status_of, runtime/base/error.hpp) turns it into the
// phase's error, so the transaction aborts or poisons as for any other.
//
// Plain C++: callers need no CUDA header. Only built where nvcc exists.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "runtime/base/error.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/stage_backend.hpp"

namespace accord {

class CudaTransformer final : public StageBackend {
 public:
  // Copies the weights of `scope` (its units; the embedding and the head
  // where it holds them) to `device`, with room for their keys and values.
  // An error, and nothing held, when there is no such device, its memory is
  // too small, or a weight's type has no CUDA kernel (Q4_0).
  static Result<std::unique_ptr<CudaTransformer>> create(const Model& model, const WeightScope& scope, int device);
  ~CudaTransformer() override;
  CudaTransformer(const CudaTransformer&) = delete;
  CudaTransformer& operator=(const CudaTransformer&) = delete;

  KvStore& kv() override;
  void embed(std::span<const int> tokens) override;
  void load_hidden(std::span<const float> rows) override;
  void run_unit(int unit, int pos) override;
  int batch() const override;
  std::span<float> hidden() override;
  void hidden_changed() override;
  std::span<float> head(Transformer::Rows rows) override;

  // With a scope of the whole model, as Transformer::forward: tokens at
  // positions pos, pos + 1, ..., their keys and values into the device's
  // cache; the logits of the last token, valid until the next call. A
  // failed check changes nothing.
  Result<std::span<const float>> forward(std::span<const int> tokens, int pos);

 private:
  struct Impl;
  explicit CudaTransformer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace accord
