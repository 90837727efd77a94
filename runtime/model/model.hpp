// A decoder of one of the architectures of architecture.hpp, loaded from disk: configuration plus its weights
// where the file mapping put them. Matrices stay in the file's type (F32,
// F16, Q8_0 or Q4_0) and the kernels read them in place (weights.hpp says
// how, in kernel types; this header names none). Norm weights are floats: in place when the file stores them as
// aligned F32, else converted into a small buffer the Model owns.
//
// Ownership: a Model owns its MappedFile and its float buffer; every weight
// pointer points into one of them and lives as long as the Model, moves
// included (both keep their storage's address when moved). A Model is
// immutable after load and may be read from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/io/mapped_file.hpp"
#include "runtime/model/architecture.hpp"

namespace accord {

struct ModelContents;  // runtime/model/weights.hpp
struct ModelWeights;   // runtime/model/weights.hpp

struct ModelConfig {
  int dim = 0;         // residual stream width
  int hidden_dim = 0;  // feed-forward width; of each expert in a mixture of experts
  int n_layers = 0;    // transformer blocks, the "units"
  int n_heads = 0;     // query heads
  int n_kv_heads = 0;  // key/value heads (grouped-query attention when < n_heads)
  int vocab_size = 0;
  int seq_len = 0;                // context length: positions 0..seq_len-1
  bool shared_classifier = true;  // the head reuses the token embedding
  float rope_theta = 10000.0f;
  float rope_theta_sliding = 10000.0f;  // RoPE base of the sliding-window layers
  float norm_eps = 1e-5f;
  Arch arch = Arch::llama;       // architecture.hpp
  int head_dim = 0;              // width of a query/key/value head; 0: dim / n_heads
  bool rope_factors = false;     // the file holds RoPE frequency factors (WeightKind::rope_factors)
  float rope_scale = 1.0f;       // LongRoPE's factor on RoPE's cos and sin (rope.scaling.attn_factor)
  float rope_freq_scale = 1.0f;  // linear RoPE scaling of the global layers' angles: 1 / rope.scaling.factor
  int sliding_window = 0;        // positions a sliding layer attends to, itself included (architecture.hpp)
  int n_experts = 0;             // experts of each block's feed-forward; 0: a dense feed-forward
  int n_experts_used = 0;        // experts each token is routed to, 1..n_experts when there are experts

  const Architecture& architecture() const { return describe(arch); }
  int head_size() const { return head_dim > 0 ? head_dim : dim / n_heads; }
  int q_dim() const { return n_heads * head_size(); }
  int kv_dim() const { return n_kv_heads * head_size(); }
  bool routed() const { return n_experts > 0; }
  // Whether `layer` attends through a sliding window.
  bool slides(int layer) const {
    const int period = architecture().sliding_window_period;
    return sliding_window > 0 && period > 0 && layer % period != period - 1;
  }
};

// Checks that the shapes are positive, divisible as attention needs and
// small enough that every tensor size fits in 64 bits with room to spare,
// and that rope theta and norm epsilon are finite and positive.
Status validate(const ModelConfig& config);

// The weights of a model (canonical_weights gives their order). The
// first twelve are Llama's; the others only some architectures have:
// RoPE's frequency factors (head_size / 2), the biases of Q, K and V (their
// widths), the per-head norms of Q and K (head_size), and the norms of the
// attention's and the feed-forward's outputs (dim), and a mixture of
// experts' router (n_experts, dim). A routed block's w1, w2 and w3 hold
// every expert's matrix, one after another: (n_experts * hidden_dim, dim)
// and (n_experts * dim, hidden_dim).
enum class WeightKind {
  token_embedding,
  rms_att,
  wq,
  wk,
  wv,
  wo,
  rms_ffn,
  w1,
  w2,
  w3,
  rms_final,
  classifier,
  rope_factors,
  bq,
  bk,
  bv,
  q_norm,
  k_norm,
  post_att_norm,
  post_ffn_norm,
  router,
};

// One weight tensor: its kind and, for those of a block, the block's layer.
struct WeightId {
  WeightKind kind;
  int layer = -1;  // -1: not a block's weight
  bool operator==(const WeightId&) const = default;
};

// Every weight of a model shaped like `config`, in the canonical order:
// the embedding; the RoPE factors when the file has them; per layer
// rms_att, wq, wk, wv, [bq, bk, bv], [q_norm, k_norm], wo,
// [post_att_norm], rms_ffn, [router], w1, w2, w3, [post_ffn_norm]; the final norm;
// the classifier when it is not shared. Llama's order is the one accord
// always had, so its identities stay.
std::vector<WeightId> canonical_weights(const ModelConfig& config);

// The length of a vector weight (a norm, a bias, the RoPE factors); 0 for a matrix.
std::size_t vector_length(const ModelConfig& config, WeightKind kind);

// Some of a routed block's experts: [first, first + count).
struct ExpertRange {
  int first = 0;
  int count = 0;
  int end() const { return first + count; }
  bool contains(int expert) const { return expert >= first && expert < end(); }
  bool operator==(const ExpertRange&) const = default;
};

// Whether `kind` is one of a routed block's expert stacks (its w1, w2 or
// w3 in a model shaped like `config`).
inline bool is_expert_stack(const ModelConfig& config, WeightKind kind) {
  return config.routed() && (kind == WeightKind::w1 || kind == WeightKind::w2 || kind == WeightKind::w3);
}

// Which of a model's weights a process reads and keeps: a rank's share
// (docs/residency.md). The rest of the file is mapped but never touched, so
// it takes no memory.
struct WeightScope {
  static constexpr int kAllUnits = 1 << 30;
  WeightScope() = default;
  WeightScope(bool with_embedding, int first, int count, bool with_head, std::vector<ExpertRange> held_experts = {})
      : embedding(with_embedding), first_unit(first), units(count), head(with_head), experts(std::move(held_experts)) {}

  bool embedding = true;  // the token embedding (the first rank)
  int first_unit = 0;     // the blocks [first_unit, first_unit + units)
  int units = kAllUnits;
  bool head = true;  // the final norm and the classifier (the output owner)
  // Where experts are spread over ranks (runtime/rank/expert_placement.hpp):
  // of each block of the model, by unit, the experts held. A block's expert
  // stacks are then held where some of its experts are, whether or not the
  // block is the scope's, and a mapped load lets go of the other experts'
  // pages once it digested them. Empty: the scope's blocks' experts, all.
  std::vector<ExpertRange> experts;

  static WeightScope everything() { return {}; }
  static WeightScope nothing() { return {false, 0, 0, false}; }
  // Whether the scope holds `id` of a model shaped like `config`. A shared
  // classifier is the embedding, so the head holds the embedding then; the
  // RoPE factors go with any unit.
  bool holds(const ModelConfig& config, WeightId id) const;
  bool holds_everything(const ModelConfig& config) const;
  // The experts of unit `unit` held, of a model with `experts` per block.
  ExpertRange experts_of(int unit, int experts_per_block) const;
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
  // The positions a session of the model may hold (--ctx-size): the file's
  // context length, or this where smaller; 0: the file's. A session's keys
  // and values take room for all of them, so a runtime sets it (a Llama 3.2
  // file says 131072), while conversion and inspection keep the file's.
  // Never past the file's: the model was not trained for those positions.
  int context = 0;
};

// The context length a model whose file says `file_context` has under `load`.
int fitted_context(int file_context, const ModelLoad& load);

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
  Model(ModelContents contents, MappedFile file);
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  const ModelConfig& config() const;
  // The weights, for the kernels (runtime/model/weights.hpp).
  const ModelWeights& weights() const;
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
  const std::string& format() const;
  // The identity of identity.hpp, computed at load; empty unless the
  // scope holds every weight.
  const std::string& identity() const;
  // The digest of each tensor of the canonical order; empty for those
  // outside the scope.
  const std::vector<std::string>& tensor_digests() const;
  const WeightScope& scope() const;
  const MappedFile& file() const { return file_; }
  // The tensors of the file in file order.
  const std::vector<StoredTensor>& tensors() const;
  // Floats held in memory the Model owns (0 when every weight is mapped).
  std::size_t owned_floats() const;
  // The bytes of `scope`'s weights as held in memory, by type ("F32",
  // "Q8_0", ...).
  std::map<std::string, std::uint64_t> weight_bytes_by_type(const WeightScope& scope) const;
  std::map<std::string, std::uint64_t> weight_bytes_by_type() const { return weight_bytes_by_type(scope()); }

 private:
  // Apart, so that this header needs no kernel types: the weights are
  // cpu::Matrix views (weights.hpp).
  std::unique_ptr<ModelContents> contents_;
  MappedFile file_;
};

// The weight bytes one decode token reads: every block's matrices and
// norms, the final norm, the classifier and one row of the token embedding
// (a shared classifier is the embedding table, counted once, whole), as
// the file stores them; of a routed block's experts, the share of the
// experts a token uses.
std::uint64_t decode_weight_bytes(const Model& model);

}  // namespace accord
