// A Llama-family decoder loaded from disk: configuration plus pointers to
// weights that stay where the file mapping put them.
//
// Ownership: a Model owns its MappedFile; every weight pointer points into
// it and lives as long as the Model. A Model is immutable after load and
// may be read from any thread.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/io/mapped_file.hpp"

namespace accord {

struct ModelConfig {
  int dim = 0;         // residual stream width
  int hidden_dim = 0;  // feed-forward width
  int n_layers = 0;    // transformer blocks, the "units"
  int n_heads = 0;     // query heads
  int n_kv_heads = 0;  // key/value heads (grouped-query attention when < n_heads)
  int vocab_size = 0;
  int seq_len = 0;  // context length: positions 0..seq_len-1
  bool shared_classifier = true;  // the head reuses the token embedding
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;

  int head_size() const { return dim / n_heads; }
  int kv_dim() const { return n_kv_heads * head_size(); }
};

// Checks that the shapes are positive, divisible as attention needs and
// small enough that every tensor size fits in 64 bits with room to spare.
Status validate(const ModelConfig& config);

// Pointers to one block's weights; matrices are row-major (out, in).
struct LayerWeights {
  const float* rms_att;  // (dim)
  const float* wq;       // (dim, dim)
  const float* wk;       // (kv_dim, dim)
  const float* wv;       // (kv_dim, dim)
  const float* wo;       // (dim, dim)
  const float* rms_ffn;  // (dim)
  const float* w1;       // (hidden_dim, dim) gate
  const float* w2;       // (dim, hidden_dim) down
  const float* w3;       // (hidden_dim, dim) up
};

struct ModelWeights {
  const float* token_embedding = nullptr;  // (vocab_size, dim)
  std::vector<LayerWeights> layers;        // n_layers blocks
  const float* rms_final = nullptr;        // (dim)
  const float* classifier = nullptr;       // (vocab_size, dim)
};

class Model {
 public:
  // Opens a model file; the format is recognised from its first bytes.
  static Result<Model> load(const std::string& path);

  Model(ModelConfig config, ModelWeights weights, MappedFile file, std::string format)
      : config_(config), weights_(std::move(weights)), file_(std::move(file)), format_(std::move(format)) {}

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const std::string& path() const { return file_.path(); }
  std::size_t file_bytes() const { return file_.size(); }
  std::size_t resident_bytes() const { return file_.resident_bytes(); }
  // A short name of the on-disk format, e.g. "llama2c-legacy".
  const std::string& format() const { return format_; }

 private:
  ModelConfig config_;
  ModelWeights weights_;
  MappedFile file_;
  std::string format_;
};

}  // namespace accord
