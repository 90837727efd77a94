// Synthetic models: valid llama2.c checkpoints with deterministic random
// weights, for demos, tests and benchmarks of shapes larger than the shared
// models, and mixtures of experts (a shape with n_experts) as F32 GGUF
// files, since llama2.c has no experts. The same shape and seed give the
// same bytes on every machine.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/base/error.hpp"
#include "runtime/model/llama2c.hpp"
#include "runtime/model/model.hpp"

namespace accord {

struct SyntheticModelOptions {
  ModelConfig config;  // shape; rope_theta and norm_eps are llama2.c's
  std::uint64_t seed = 1;
  llama2c::Layout layout = llama2c::Layout::legacy;  // a dense shape's
};

// Writes the checkpoint to `path`. Each tensor draws from its own stream
// (seed, tensor), so both layouts hold the same weights. A routed shape is
// written as GGUF, each weight from its own stream (seed, kind, layer).
Status write_synthetic_model(const std::string& path, const SyntheticModelOptions& options);

}  // namespace accord
