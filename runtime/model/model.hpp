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
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/matrix.hpp"
#include "runtime/base/error.hpp"
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

// Which of a model's weights a process reads and keeps: a rank's share
// (docs/residency.md). The rest of the file is mapped but never touched, so
// it takes no memory.
struct WeightScope {
  static constexpr int kAllUnits = 1 << 30;
  bool embedding = true;   // the token embedding (the first rank)
  int first_unit = 0;      // the blocks [first_unit, first_unit + units)
  int units = kAllUnits;
  bool head = true;        // the final norm and the classifier (the output owner)

  static WeightScope everything() { return {}; }
  static WeightScope nothing() { return {false, 0, 0, false}; }
  // Whether the scope holds `id` of a model shaped like `config`. A shared
  // classifier is the embedding, so the head holds the embedding then.
  bool holds(const ModelConfig& config, WeightId id) const;
  bool holds_everything(const ModelConfig& config) const;
  bool operator==(const WeightScope&) const = default;
};

// Whether steps read only a few rows of the embedding (by token id), which
// is so unless the scope's head uses it as the classifier. Such rows are
// let go once read (their pages unmapped from the process).
inline bool embedding_is_lookup_only(const ModelConfig& config, const WeightScope& scope) {
  return !(scope.head && config.shared_classifier);
}

// How Model::load reads a file.
struct ModelLoad {
  WeightScope scope;
  int threads = 1;  // tensors digested at once; each is one thread's
  // The bytes are a read-only private file mapping (Model::load says so),
  // so pages of a tensor that steps use only a few rows of (the embedding
  // where it is not the classifier) are let go as they are digested.
  bool mapped = false;
  // Told the bytes of weights read so far and in all, after each tensor;
  // one call at a time, from any of the loading threads. For a display.
  std::function<void(std::uint64_t done, std::uint64_t total)> progress = {};
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

// One weight tensor where it lies: a matrix, or a norm's floats.
struct WeightTensor {
  WeightId id;
  const cpu::Matrix* matrix = nullptr;
  const float* norm = nullptr;  // (dim), when matrix is null
};

// Every weight tensor `scope` holds, in one canonical order (embedding; per
// layer rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3; final norm; the
// classifier when it is not shared), whatever the file layout. The
// index of a tensor in the list of everything is its canonical index.
std::vector<WeightTensor> weight_tensors(const ModelConfig& config, const ModelWeights& weights,
                                         const WeightScope& scope = WeightScope::everything());

// Calls fn for every piece of `tensor`, a few whole rows at a time: where
// they lie for floats, else dequantized into `scratch`, so a quantized
// model never exists whole as floats.
void for_each_piece(const WeightTensor& tensor, int dim, std::vector<float>& scratch,
                    const std::function<void(const WeightPiece& piece)>& fn);

// Where `tensor` lies in `bytes` (a model file's), as offsets; nullopt
// when it lies elsewhere (a norm the Model owns).
std::optional<ByteRange> tensor_range(const WeightTensor& tensor, int dim, std::span<const std::byte> bytes);

// Where `tensors` lie in `bytes`, sorted by offset, touching ranges merged.
std::vector<ByteRange> tensor_ranges(const std::vector<WeightTensor>& tensors, int dim,
                                     std::span<const std::byte> bytes);

// for_each_piece over weight_tensors(config, weights), in order.
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
  WeightScope scope;     // the weights read; the others point into the file but were never touched
  // identity.hpp; the readers set them as they check every weight read is
  // finite. identity is empty unless the scope holds every weight.
  std::vector<std::string> tensor_digests;
  std::string identity;
};

class Model {
 public:
  // Opens a model file; the format is recognised from its first bytes
  // (GGUF magic, llama2.c "ak42" magic, else the legacy llama2.c header),
  // never from its name. Reads every weight of load.scope once, to digest
  // it (identity.hpp) and refuse a weight that is NaN or infinite; a weight
  // outside the scope is mapped but not read, and must not be used.
  static Result<Model> load(const std::string& path, const ModelLoad& load = {});

  // Reads the model in `bytes` (a whole file) without keeping it: for
  // fuzzers and checks. `name` prefixes error messages.
  static Result<ModelContents> read(std::span<const std::byte> bytes, const std::string& name,
                                    const ModelLoad& load = {});

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
  // Bytes of the file mapped into this process now, and of `scope`'s
  // tensors among them, plus the floats the Model owns (pagemap: what this
  // process holds, not what the page cache does).
  std::size_t resident_bytes() const;
  std::size_t resident_bytes(const WeightScope& scope) const;
  // Where `scope`'s tensors lie in the file (tensor_ranges); a norm the
  // Model owns lies elsewhere.
  std::vector<ByteRange> file_ranges(const WeightScope& scope) const;
  // A short name of the on-disk format, e.g. "llama2c-legacy" or "gguf-v3".
  const std::string& format() const { return contents_.format; }
  // The identity of identity.hpp, computed at load; empty unless the
  // scope holds every weight.
  const std::string& identity() const { return contents_.identity; }
  // The digest of each tensor of the canonical order; empty for those
  // outside the scope.
  const std::vector<std::string>& tensor_digests() const { return contents_.tensor_digests; }
  const WeightScope& scope() const { return contents_.scope; }
  const MappedFile& file() const { return file_; }
  // The tensors of the file in file order.
  const std::vector<StoredTensor>& tensors() const { return contents_.tensors; }
  // Floats held in memory the Model owns (0 when every weight is mapped).
  std::size_t owned_floats() const { return contents_.owned.size(); }
  // The bytes of `scope`'s weights as held in memory, by type ("F32",
  // "Q8_0", ...).
  std::map<std::string, std::uint64_t> weight_bytes_by_type(const WeightScope& scope) const;
  std::map<std::string, std::uint64_t> weight_bytes_by_type() const { return weight_bytes_by_type(scope()); }

 private:
  ModelContents contents_;
  MappedFile file_;
};

// The weight bytes one decode token reads: every block's matrices and
// norms, the final norm, the classifier and one row of the token embedding
// (a shared classifier is the embedding table, counted once, whole), as
// the file stores them.
std::uint64_t decode_weight_bytes(const Model& model);

}  // namespace accord
