#include "runtime/model/identity.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include "runtime/io/digest.hpp"

namespace accord {

namespace {

// Weights are digested and checked a chunk at a time, so the check reads
// what the digest just brought into the cache: one pass over memory.
constexpr std::size_t kChunk = 4096;

// Whether any of `data[0..n)`, n <= kChunk, is NaN or infinite. Counting
// instead of stopping at the first lets the loop vectorize (twice as fast
// as a bool reduction here).
bool any_non_finite(const float* data, std::size_t n) {
  std::uint32_t count = 0;
  for (std::size_t i = 0; i < n; ++i) count += !(std::fabs(data[i]) <= std::numeric_limits<float>::max());
  return count != 0;
}

// Names the tensor, the first bad element and its value.
Error non_finite_error(const std::string& name, const std::string& tensor, const WeightPiece& piece) {
  const float* bad = std::find_if(piece.data, piece.data + piece.count, [](float v) { return !std::isfinite(v); });
  return Error(ErrorCode::format, name + ": tensor " + tensor + " holds " + std::to_string(*bad) + " at element " +
                                      std::to_string(piece.first + static_cast<std::size_t>(bad - piece.data)) +
                                      " of " + std::to_string(piece.total) +
                                      "; a model's weights must be finite numbers");
}

}  // namespace

Status identify(ModelContents& contents, const std::string& name, const TensorNamer& tensor_name) {
  const ModelConfig& c = contents.config;
  FastDigest digest;
  digest.update("accord-model-identity-1", 23);
  for (int field : {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len}) {
    digest.update_value(field);
  }
  digest.update_value(c.rope_theta).update_value(c.norm_eps).update_value(c.shared_classifier);

  std::optional<Error> failed;
  for_each_weight(c, contents.weights, [&](const WeightPiece& piece) {
    if (failed) return;
    for (std::size_t start = 0; start < piece.count; start += kChunk) {
      const std::size_t n = std::min(kChunk, piece.count - start);
      digest.update(piece.data + start, n * sizeof(float));
      if (any_non_finite(piece.data + start, n)) {
        failed = non_finite_error(name, tensor_name(piece.id), piece);
        return;
      }
    }
  });
  if (failed) return *failed;
  contents.identity = digest.hex();
  return {};
}

std::string model_identity(const Model& model) { return model.identity(); }

}  // namespace accord
