// A Llama-family decoder loaded from disk: configuration plus its weights
// where the file mapping put them. Matrices stay in the file's type (F32,
// F16, Q8_0 or Q4_0; kernels/cpu/matrix.hpp) and the kernels read them in
// place. Norm weights are floats: in place when the file stores them as
// aligned F32, else converted into a small buffer the Model owns.
//
// Ownership: a Model owns its MappedFile and its float buffer; every weight
// pointer points into one of them and lives as long as the Model, moves
// included (both keep their storage's address when moved). A Model is
// immutable after load and may be read from any thread.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/matrix.hpp"
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
// small enough that every tensor size fits in 64 bits with room to spare,
// and that rope theta and norm epsilon are finite and positive.
Status validate(const ModelConfig& config);

// One block's weights; matrices are row-major (out, in).
struct LayerWeights {
  const float* rms_att = nullptr;  // (dim)
  cpu::Matrix wq;                  // (dim, dim)
  cpu::Matrix wk;                  // (kv_dim, dim)
  cpu::Matrix wv;                  // (kv_dim, dim)
  cpu::Matrix wo;                  // (dim, dim)
  const float* rms_ffn = nullptr;  // (dim)
  cpu::Matrix w1;                  // (hidden_dim, dim) gate
  cpu::Matrix w2;                  // (dim, hidden_dim) down
  cpu::Matrix w3;                  // (hidden_dim, dim) up
};

struct ModelWeights {
  cpu::Matrix token_embedding;       // (vocab_size, dim)
  std::vector<LayerWeights> layers;  // n_layers blocks
  const float* rms_final = nullptr;  // (dim)
  cpu::Matrix classifier;            // (vocab_size, dim)
};

// The weights of a model, in the canonical order of for_each_weight.
enum class WeightKind { token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, classifier };

// One weight tensor: its kind and, for those of a block, the block's layer.
struct WeightId {
  WeightKind kind;
  int layer = -1;  // -1: not a block's weight
};

// A piece of a weight tensor as floats: values [first, first + count) of
// its total.
struct WeightPiece {
  WeightId id;
  const float* data;
  std::size_t count;
  std::size_t first;
  std::size_t total;
};

// Calls fn for every weight tensor in one canonical order (embedding; per
// layer rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3; final norm; the
// classifier when it is not shared), whatever the file layout. A tensor
// stored as floats comes in one piece; any other matrix is dequantized a
// few rows at a time into a buffer that lives until fn returns, so a
// quantized model never exists whole as floats.
void for_each_weight(const ModelConfig& config, const ModelWeights& weights,
                     const std::function<void(const WeightPiece& piece)>& fn);

// One tensor as the file stores it (for `accord inspect`).
struct StoredTensor {
  std::string name;
  std::string type;                  // "F32", "F16", "Q8_0", "Q4_0"
  std::vector<std::uint64_t> shape;  // GGUF: ggml order, fastest first; llama2.c: row-major, slowest first
  std::uint64_t offset = 0;          // bytes from the start of the file
  std::uint64_t bytes = 0;
};

// What a model file's header says, read without touching the weights.
struct ModelHeader {
  ModelConfig config;
  std::string format;  // e.g. "llama2c-legacy", "gguf-v3"
};

// What a format reader makes of a file's bytes: the weights point into
// those bytes or into `owned`.
struct ModelContents {
  ModelConfig config;
  ModelWeights weights;
  std::vector<float> owned;  // norm weights not stored as aligned F32; the buffer keeps its address when moved
  std::vector<StoredTensor> tensors;
  std::string format;    // e.g. "llama2c-legacy", "gguf-v3"
  std::string identity;  // identity.hpp; the readers set it as they check every weight is finite
};

class Model {
 public:
  // Opens a model file; the format is recognised from its first bytes
  // (GGUF magic, llama2.c "ak42" magic, else the legacy llama2.c header),
  // never from its name. Reads every weight once, to compute the identity
  // and refuse a weight that is NaN or infinite.
  static Result<Model> load(const std::string& path);

  // Reads the model in `bytes` (a whole file) without keeping it: for
  // fuzzers and checks. `name` prefixes error messages.
  static Result<ModelContents> read(std::span<const std::byte> bytes, const std::string& name);

  // Reads only the header of the model file at `path` (for GGUF also the
  // metadata and tensor table), validated as load() validates it but
  // touching no weight, so that what must fit the model (a tokenizer) can
  // be checked before a long load. A truncated or damaged weight section
  // may still fail load().
  static Result<ModelHeader> read_header(const std::string& path);

  // `contents` must point into `file` or into its own `owned` buffer.
  Model(ModelContents contents, MappedFile file) : contents_(std::move(contents)), file_(std::move(file)) {}

  const ModelConfig& config() const { return contents_.config; }
  const ModelWeights& weights() const { return contents_.weights; }
  const std::string& path() const { return file_.path(); }
  std::size_t file_bytes() const { return file_.size(); }
  std::size_t resident_bytes() const { return file_.resident_bytes(); }
  // A short name of the on-disk format, e.g. "llama2c-legacy" or "gguf-v3".
  const std::string& format() const { return contents_.format; }
  // The identity of identity.hpp, computed at load.
  const std::string& identity() const { return contents_.identity; }
  // The tensors of the file in file order.
  const std::vector<StoredTensor>& tensors() const { return contents_.tensors; }
  // Floats held in memory the Model owns (0 when every weight is mapped).
  std::size_t owned_floats() const { return contents_.owned.size(); }
  // The bytes of the weights as held in memory, by type ("F32", "Q8_0", ...).
  std::map<std::string, std::uint64_t> weight_bytes_by_type() const;

 private:
  ModelContents contents_;
  MappedFile file_;
};

}  // namespace accord
