// What the fuzz targets do with a successfully read model or tokenizer, so
// that AddressSanitizer sees every pointer the readers hand out used.
#pragma once

#include <string>
#include <string_view>

#include "runtime/model/model.hpp"
#include "runtime/model/tokenizer.hpp"

namespace accord::fuzz {

// Keeps a value alive so the compiler cannot drop the work that made it.
inline void consume(std::string_view text) {
  static volatile std::size_t sink;
  sink = sink + text.size();
}

inline void consume(float value) {
  static volatile float sink;
  sink = sink + value;
}

// Reads the first and last float of every weight tensor.
inline void touch_weights(const ModelContents& model) {
  const ModelConfig& c = model.config;
  const std::size_t D = c.dim, H = c.hidden_dim, KV = c.kv_dim(), V = c.vocab_size;
  auto touch = [](const float* p, std::size_t n) { consume(p[0] + p[n - 1]); };
  touch(model.weights.token_embedding, V * D);
  touch(model.weights.classifier, V * D);
  touch(model.weights.rms_final, D);
  for (const LayerWeights& l : model.weights.layers) {
    touch(l.rms_att, D);
    touch(l.wq, D * D);
    touch(l.wk, KV * D);
    touch(l.wv, KV * D);
    touch(l.wo, D * D);
    touch(l.rms_ffn, D);
    touch(l.w1, H * D);
    touch(l.w2, D * H);
    touch(l.w3, H * D);
  }
}

// Encodes a few texts and decodes every token of the result.
inline void exercise(const Tokenizer& tokenizer) {
  for (const char* text : {"Hello world", " a  b\n\t'll 123 \xE4\xB8\xAD\xFF", ""}) {
    auto ids = tokenizer.encode(text, true, true);
    if (!ids) continue;
    int previous = tokenizer.bos_id();
    for (int id : *ids) {
      if (id >= 0 && id < tokenizer.vocab_size()) consume(tokenizer.decode(previous, id));
      previous = id;
    }
  }
}

}  // namespace accord::fuzz
