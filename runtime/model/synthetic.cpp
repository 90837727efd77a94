#include "runtime/model/synthetic.hpp"

#include <cmath>
#include <vector>

#include "runtime/model/gguf_model.hpp"

namespace accord {

namespace {

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1).
float uniform(std::uint64_t& state) {
  return static_cast<float>(splitmix64(state) >> 40) / static_cast<float>(1ull << 23) - 1.0f;
}

// The fan-in of a matrix, or 0 for a norm weight.
int fan_in(llama2c::Tensor tensor, const ModelConfig& c) {
  using llama2c::Tensor;
  switch (tensor) {
    case Tensor::wq:
    case Tensor::wk:
    case Tensor::wv:
    case Tensor::wo:
    case Tensor::w1:
    case Tensor::w3:
    case Tensor::classifier:
    case Tensor::token_embedding: return c.dim;
    case Tensor::w2: return c.hidden_dim;
    default: return 0;
  }
}

// The fan-in of a weight of a GGUF model, or 0 for a vector.
int fan_in(WeightKind kind, const ModelConfig& c) {
  switch (kind) {
    case WeightKind::wq:
    case WeightKind::wk:
    case WeightKind::wv:
    case WeightKind::w1:
    case WeightKind::w3:
    case WeightKind::router:
    case WeightKind::classifier:
    case WeightKind::token_embedding: return c.dim;
    case WeightKind::wo: return c.q_dim();
    case WeightKind::w2: return c.hidden_dim;
    default: return 0;
  }
}

// Matrices: uniform with variance 1/fan_in, which keeps activations of
// order one through the layers. Norm weights: close to one.
void fill_uniform(std::uint64_t state, int fan, float* out, std::size_t count) {
  const float scale = fan > 0 ? std::sqrt(3.0f / static_cast<float>(fan)) : 0.1f;
  const float offset = fan > 0 ? 0.0f : 1.0f;
  for (std::size_t i = 0; i < count; ++i) out[i] = offset + scale * uniform(state);
}

Status write_routed(const std::string& path, const SyntheticModelOptions& options) {
  const ModelConfig& c = options.config;
  return write_gguf_weights(path, c, [&](WeightId id, float* out, std::size_t count) {
    const auto stream = static_cast<std::uint64_t>(id.kind) * 1024 + static_cast<std::uint64_t>(id.layer + 1);
    fill_uniform(options.seed * 0x100000001B3ull + stream + 1, fan_in(id.kind, c), out, count);
  });
}

}  // namespace

Status write_synthetic_model(const std::string& path, const SyntheticModelOptions& options) {
  const ModelConfig& c = options.config;
  if (c.routed()) return write_routed(path, options);
  auto fill = [&](llama2c::Tensor tensor, float* out, std::size_t count) {
    fill_uniform(options.seed * 0x100000001B3ull + static_cast<std::uint64_t>(tensor) + 1, fan_in(tensor, c), out,
                 count);
  };
  return llama2c::write(path, c, options.layout, fill);
}

}  // namespace accord
