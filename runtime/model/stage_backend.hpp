// Where a rank's units compute: the backend seam (docs/gpu.md).
//
// A StageBackend runs a rank's share of the forward pass one unit at a time
// and keeps that share's keys and values (its KvStore). The session's
// state, checkpoints, digests, rollback and prompt cache reach the keys and
// values only through the KvStore, so they work wherever the rows live.
//
// The seam sits at a unit (a transformer block), not at each kernel: a
// backend keeps its activations where its kernels run (host memory, device
// memory) and only the step's input, output and what observers look at
// cross to the host.
//
// Two backends: CpuStage (the CPU kernels, kernels/cpu) and the CUDA one
// (runtime/model/cuda_transformer.hpp, where nvcc exists). One call at a
// time; not thread-safe.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/base/error.hpp"
#include "runtime/model/backend.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/transformer.hpp"

namespace accord {

class StageBackend {
 public:
  virtual ~StageBackend() = default;

  // The keys and values of the stage's units.
  virtual KvStore& kv() = 0;

  // A step starts from token ids (the first rank) or from the previous
  // rank's activations (rows, dim); then its units run in order, writing
  // their keys and values at positions pos, pos + 1, ...
  virtual void embed(std::span<const int> tokens) = 0;
  virtual void load_hidden(std::span<const float> rows) = 0;
  virtual void run_unit(int unit, int pos) = 0;
  virtual int batch() const = 0;
  // The residual stream, (batch, dim), in host memory; valid until the next
  // call. After changing it, call hidden_changed() before the next unit.
  virtual std::span<float> hidden() = 0;
  virtual void hidden_changed() = 0;
  // On the output owner: the logits after the final norm, (rows, vocab), in
  // host memory, valid until the next call.
  virtual std::span<float> head(Transformer::Rows rows) = 0;
};

// The CPU kernels over a host KvCache.
class CpuStage final : public StageBackend {
 public:
  // model and pool must outlive the stage; the cache takes its blocks from
  // kv_pool (nullptr: a pool of its own).
  CpuStage(const Model& model, cpu::ThreadPool& pool, int first_unit, int unit_count,
           cpu::KvElement element = cpu::KvElement::f32, std::shared_ptr<KvPool> kv_pool = nullptr)
      : transformer_(model, pool), cache_(model.config(), first_unit, unit_count, element, std::move(kv_pool)) {}

  KvStore& kv() override { return cache_; }
  void embed(std::span<const int> tokens) override { transformer_.embed(tokens); }
  void load_hidden(std::span<const float> rows) override { transformer_.load_hidden(rows); }
  void run_unit(int unit, int pos) override { transformer_.run_unit(unit, pos, cache_); }
  int batch() const override { return transformer_.batch(); }
  std::span<float> hidden() override { return transformer_.hidden(); }
  void hidden_changed() override {}  // the kernels read the host stream itself
  std::span<float> head(Transformer::Rows rows) override { return transformer_.head(rows); }

  // For what only the CPU does: continuous batching and layered weights.
  Transformer& transformer() { return transformer_; }
  KvCache& cache() { return cache_; }

 private:
  Transformer transformer_;
  KvCache cache_;
};

// What one position's keys and values take over every unit of the model,
// in a cache of `type`.
std::uint64_t kv_position_bytes(const ModelConfig& config, KvType type);
// Whether a model's keys and values can be stored as `type`: Q8_0 needs
// kv_dim in whole groups of 32; an error naming kv_dim and the type if not.
Status check_kv_type(const ModelConfig& config, KvType type);

// The stage of `scope`'s units on `device`, or why not. Ranks call it with
// their share; check_backend first gives the clearer error.
Result<std::unique_ptr<StageBackend>> make_stage(const Model& model, cpu::ThreadPool& pool, const WeightScope& scope,
                                                 const StageOptions& options, int rank);

// The CUDA half, in runtime/model/cuda_transformer.cu where nvcc exists and
// runtime/model/cuda_absent.cpp (which says so) where it does not.
bool built_with_cuda();
Status check_cuda_devices(std::span<const int> devices);
Result<std::unique_ptr<StageBackend>> make_cuda_stage(const Model& model, const WeightScope& scope, int device);

}  // namespace accord
