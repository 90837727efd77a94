#include "runtime/model/synthetic.hpp"

#include <cmath>
#include <vector>

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

}  // namespace

Status write_synthetic_model(const std::string& path, const SyntheticModelOptions& options) {
  const ModelConfig& c = options.config;
  auto fill = [&](llama2c::Tensor tensor, float* out, std::size_t count) {
    std::uint64_t state = options.seed * 0x100000001B3ull + static_cast<std::uint64_t>(tensor) + 1;
    const int fan = fan_in(tensor, c);
    // Matrices: uniform with variance 1/fan_in, which keeps activations of
    // order one through the layers. Norm weights: close to one.
    const float scale = fan > 0 ? std::sqrt(3.0f / static_cast<float>(fan)) : 0.1f;
    const float offset = fan > 0 ? 0.0f : 1.0f;
    for (std::size_t i = 0; i < count; ++i) out[i] = offset + scale * uniform(state);
  };
  return llama2c::write(path, c, options.layout, fill);
}

}  // namespace accord
