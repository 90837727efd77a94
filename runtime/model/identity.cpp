#include "runtime/model/identity.hpp"

#include "runtime/io/digest.hpp"

namespace accord {

std::string model_identity(const Model& model) {
  const ModelConfig& c = model.config();
  FastDigest digest;
  digest.update("accord-model-identity-1", 23);
  for (int field : {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len}) {
    digest.update_value(field);
  }
  digest.update_value(c.rope_theta).update_value(c.norm_eps).update_value(c.shared_classifier);

  for_each_weight(c, model.weights(),
                  [&](const float* data, std::size_t count) { digest.update(data, count * sizeof(float)); });
  return digest.hex();
}

}  // namespace accord
