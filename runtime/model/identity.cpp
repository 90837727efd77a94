#include "runtime/model/identity.hpp"

#include "runtime/io/digest.hpp"

namespace accord {

std::string model_identity(const Model& model) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  FastDigest digest;
  digest.update("accord-model-identity-1", 23);
  for (int field : {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len}) {
    digest.update_value(field);
  }
  digest.update_value(c.rope_theta).update_value(c.norm_eps).update_value(c.shared_classifier);

  const std::size_t D = c.dim, H = c.hidden_dim, KV = c.kv_dim(), V = c.vocab_size;
  auto tensor = [&](const float* p, std::size_t count) { digest.update(p, count * sizeof(float)); };
  tensor(w.token_embedding, V * D);
  for (const LayerWeights& l : w.layers) {
    tensor(l.rms_att, D);
    tensor(l.wq, D * D);
    tensor(l.wk, KV * D);
    tensor(l.wv, KV * D);
    tensor(l.wo, D * D);
    tensor(l.rms_ffn, D);
    tensor(l.w1, H * D);
    tensor(l.w2, D * H);
    tensor(l.w3, H * D);
  }
  tensor(w.rms_final, D);
  if (!c.shared_classifier) tensor(w.classifier, V * D);
  return digest.hex();
}

}  // namespace accord
