#include "runtime/model/gguf_model.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_set>

#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/quant.hpp"
#include "runtime/base/assert.hpp"
#include "runtime/model/identity.hpp"

namespace accord {

namespace {

using gguf::TensorType;
using gguf::Value;
using gguf::ValueType;

// One tensor of a GGUF file: its name, its ggml shape (input features
// first) and the weights it fills: one, or for a fused tensor its parts in
// the order of their rows. The reader and the writer both walk the list of
// an architecture's slots, so they cannot disagree.
struct Slot {
  std::string name;
  std::vector<std::uint64_t> shape;
  std::vector<WeightId> ids;
};

// A weight's GGUF name without its block and suffix (a bias and its
// matrix share one).
std::string base_name(WeightKind kind) {
  static const char* const names[] = {"token_embd",
                                      "attn_norm",
                                      "attn_q",
                                      "attn_k",
                                      "attn_v",
                                      "attn_output",
                                      "ffn_norm",
                                      "ffn_gate",
                                      "ffn_down",
                                      "ffn_up",
                                      "output_norm",
                                      "output",
                                      "rope_freqs",
                                      "attn_q",
                                      "attn_k",
                                      "attn_v",
                                      "attn_q_norm",
                                      "attn_k_norm",
                                      "post_attention_norm",
                                      "post_ffw_norm",
                                      "ffn_gate_inp"};
  return names[static_cast<std::size_t>(kind)];
}

bool is_bias(WeightKind kind) { return kind == WeightKind::bq || kind == WeightKind::bk || kind == WeightKind::bv; }

// GGUF's (llama.cpp's) name of a weight, e.g. "blk.3.attn_q.weight".
std::string tensor_name(WeightId id) {
  const std::string block = id.layer < 0 ? "" : "blk." + std::to_string(id.layer) + ".";
  return block + base_name(id.kind) + (is_bias(id.kind) ? ".bias" : ".weight");
}

// The name of the RoPE factors the slots read: Llama 3's, or LongRoPE's
// long ones when the context exceeds the original (as llama.cpp chooses).
struct RopeFactorNames {
  std::string used;
  std::string unused;  // accepted in the file, never read
};

// An architecture's slots, built block by block (architecture.hpp says
// which tensors each has).
class SlotList {
 public:
  explicit SlotList(const ModelConfig& c) : c_(c) {}

  void add(WeightId id, std::vector<std::uint64_t> shape) {
    slots_.push_back({tensor_name(id), std::move(shape), {id}});
  }
  // A tensor named otherwise than its weight: a fused one, the RoPE factors.
  void add_named(const std::string& name, std::vector<std::uint64_t> shape, std::vector<WeightId> ids) {
    slots_.push_back({name, std::move(shape), std::move(ids)});
  }
  std::vector<Slot> take() { return std::move(slots_); }

  void add_block(int i) {
    using K = WeightKind;
    const Architecture& a = c_.architecture();
    const auto D = u64(c_.dim), H = u64(c_.hidden_dim), Q = u64(c_.q_dim()), KV = u64(c_.kv_dim());
    const auto head = u64(c_.head_size());
    add({K::rms_att, i}, {D});
    if (a.fused_qkv) {
      add_named(prefix(i) + "attn_qkv.weight", {D, Q + 2 * KV}, {{K::wq, i}, {K::wk, i}, {K::wv, i}});
    } else {
      add({K::wq, i}, {D, Q});
      add({K::wk, i}, {D, KV});
      add({K::wv, i}, {D, KV});
    }
    if (a.qkv_bias) {
      add({K::bq, i}, {Q});
      add({K::bk, i}, {KV});
      add({K::bv, i}, {KV});
    }
    if (a.qk_norm) {
      add({K::q_norm, i}, {head});
      add({K::k_norm, i}, {head});
    }
    add({K::wo, i}, {Q, D});
    if (a.post_norms) add({K::post_att_norm, i}, {D});
    add({K::rms_ffn, i}, {D});
    if (c_.routed()) {
      add_experts(i);
    } else if (a.fused_gate_up) {
      add({K::w2, i}, {H, D});
      add_named(prefix(i) + "ffn_up.weight", {D, 2 * H}, {{K::w1, i}, {K::w3, i}});
    } else {
      add({K::w1, i}, {D, H});
      add({K::w2, i}, {H, D});
      add({K::w3, i}, {D, H});
    }
    if (a.post_norms) add({K::post_ffn_norm, i}, {D});
  }

  // A routed feed-forward: the router, then each of gate, up and down as
  // one 3-D tensor of every expert's matrix (ggml's order: input width,
  // output rows, experts).
  void add_experts(int i) {
    using K = WeightKind;
    const auto D = u64(c_.dim), H = u64(c_.hidden_dim), E = u64(c_.n_experts);
    add({K::router, i}, {D, E});
    add_named(prefix(i) + "ffn_gate_exps.weight", {D, H, E}, {{K::w1, i}});
    add_named(prefix(i) + "ffn_up_exps.weight", {D, H, E}, {{K::w3, i}});
    add_named(prefix(i) + "ffn_down_exps.weight", {H, D, E}, {{K::w2, i}});
  }

 private:
  static std::uint64_t u64(int v) { return static_cast<std::uint64_t>(v); }
  static std::string prefix(int i) { return "blk." + std::to_string(i) + "."; }

  const ModelConfig& c_;
  std::vector<Slot> slots_;
};

// The tensors of a model shaped like `c`, in file order (llama.cpp's).
std::vector<Slot> gguf_slots(const ModelConfig& c, const std::string& rope_factors) {
  using K = WeightKind;
  const auto D = static_cast<std::uint64_t>(c.dim), V = static_cast<std::uint64_t>(c.vocab_size);
  SlotList list(c);
  list.add({K::token_embedding}, {D, V});
  if (c.rope_factors) {
    list.add_named(rope_factors, {static_cast<std::uint64_t>(c.head_size() / 2)}, {{K::rope_factors}});
  }
  for (int i = 0; i < c.n_layers; ++i) list.add_block(i);
  list.add({K::rms_final}, {D});
  if (!c.shared_classifier) list.add({K::classifier}, {D, V});
  return list.take();
}

// The rows of a fused tensor's part `kind`.
int part_rows(const ModelConfig& c, WeightKind kind) {
  switch (kind) {
    case WeightKind::wq: return c.q_dim();
    case WeightKind::wk:
    case WeightKind::wv: return c.kv_dim();
    default: return c.hidden_dim;  // w1, w3
  }
}

// How errors name a weight of this file (a part of a fused tensor by the tensor).
TensorNamer namer(const std::vector<Slot>& slots) {
  return [&slots](WeightId id) {
    for (const Slot& slot : slots) {
      for (const WeightId& part : slot.ids) {
        if (part == id) return slot.name;
      }
    }
    return tensor_name(id);
  };
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// Reads typed metadata with one error style: "NAME: KEY: problem".
class MetadataReader {
 public:
  MetadataReader(const gguf::File& file, const std::string& name) : file_(file), name_(name) {}

  Result<int> integer(const std::string& key, std::optional<int> fallback = std::nullopt) const {
    const Value* value = file_.find(key);
    if (value == nullptr) return missing(key, fallback);
    auto v = value->as_int();
    if (!v) return error(key, v.error().message());
    if (*v < std::numeric_limits<int>::min() || *v > std::numeric_limits<int>::max()) {
      return error(key, std::to_string(*v) + " is out of range");
    }
    return static_cast<int>(*v);
  }

  // A float that must be finite and positive (an epsilon, a RoPE base).
  Result<float> positive_real(const std::string& key, float fallback) const {
    const Value* value = file_.find(key);
    if (value == nullptr) return fallback;
    auto v = value->as_float();
    if (!v) return error(key, v.error().message());
    const auto f = static_cast<float>(*v);
    if (!std::isfinite(f) || !(f > 0.0f)) return error(key, value->describe() + " is not a finite positive number");
    return f;
  }

  Result<std::string> text(const std::string& key, std::optional<std::string> fallback = std::nullopt) const {
    const Value* value = file_.find(key);
    if (value == nullptr) return missing<std::string>(key, fallback);
    auto v = value->as_string();
    if (!v) return error(key, v.error().message());
    return std::string(*v);
  }

  bool has(const std::string& key) const { return file_.find(key) != nullptr; }

  Error error(const std::string& key, const std::string& problem) const {
    return Error(ErrorCode::format, name_ + ": metadata " + key + ": " + problem);
  }

 private:
  template <class T>
  Result<T> missing(const std::string& key, std::optional<T> fallback) const {
    if (fallback) return *fallback;
    return Error(ErrorCode::format, name_ + ": missing metadata key " + key);
  }

  const gguf::File& file_;
  const std::string& name_;
};

// Stores a read value in `out` unless an earlier read failed; keeps the
// first error.
template <class T>
void take(Result<T> value, T& out, std::optional<Error>& first_error) {
  if (first_error) return;
  if (value) {
    out = *value;
  } else {
    first_error = value.error();
  }
}

// The keys that shape the model, ARCH.* for an architecture ARCH.
Status read_shape_keys(const MetadataReader& meta, const std::string& arch, ModelConfig& c) {
  std::optional<Error> failed;
  take(meta.integer(arch + ".embedding_length"), c.dim, failed);
  take(meta.integer(arch + ".feed_forward_length"), c.hidden_dim, failed);
  take(meta.integer(arch + ".block_count"), c.n_layers, failed);
  take(meta.integer(arch + ".attention.head_count"), c.n_heads, failed);
  take(meta.integer(arch + ".attention.head_count_kv", c.n_heads), c.n_kv_heads, failed);
  take(meta.integer(arch + ".context_length"), c.seq_len, failed);
  take(meta.positive_real(arch + ".attention.layer_norm_rms_epsilon", 1e-5f), c.norm_eps, failed);
  take(meta.positive_real(arch + ".rope.freq_base", 10000.0f), c.rope_theta, failed);
  take(meta.positive_real(arch + ".rope.freq_base_swa", c.architecture().sliding_rope_base), c.rope_theta_sliding,
       failed);
  take(meta.positive_real(arch + ".rope.scaling.attn_factor", 1.0f), c.rope_scale, failed);
  if (c.architecture().sliding_window_period > 0) {
    take(meta.integer(arch + ".attention.sliding_window", 0), c.sliding_window, failed);
  }
  int head = 0;
  take(meta.integer(arch + ".attention.key_length", 0), head, failed);
  if (failed) return *failed;
  if (head < 0) return meta.error(arch + ".attention.key_length", std::to_string(head) + " is negative");
  // A head width of its own only where it differs, so that a Llama file's
  // configuration (and identity) stays what it was.
  if (head > 0 && c.n_heads > 0 && head * c.n_heads != c.dim) c.head_dim = head;
  return {};
}

// RoPE scaling as llama.cpp takes it: linear (the default type) and
// LongRoPE's divide the global layers' angles by rope.scaling.factor (or
// the older rope.scale_linear); "none" ignores it; YaRN and the others are
// refused.
Status read_rope_scaling(const MetadataReader& meta, const std::string& arch, ModelConfig& c, const std::string& name) {
  auto type = meta.text(arch + ".rope.scaling.type", "linear");
  if (!type) return type.error();
  if (*type != "none" && *type != "linear" && *type != "longrope") {
    return Error(ErrorCode::architecture, name + ": RoPE scaling '" + *type + "' is not supported");
  }
  auto factor = meta.positive_real(arch + ".rope.scaling.factor", 0.0f);  // 0: absent
  if (factor && *factor == 0.0f) factor = meta.positive_real(arch + ".rope.scale_linear", 0.0f);
  if (!factor) return factor.error();
  c.rope_freq_scale = (*type == "none" || *factor == 0.0f) ? 1.0f : 1.0f / *factor;
  return {};
}

// A mixture of experts' keys: how many experts, how many route each token
// (validate() checks both) and, where the architecture says so, an
// expert's width. Experts where the architecture has none are refused, and
// their absence where it has nothing else.
Status read_experts(const MetadataReader& meta, const std::string& arch, ModelConfig& c, const std::string& name) {
  std::optional<Error> failed;
  take(meta.integer(arch + ".expert_count", 0), c.n_experts, failed);
  take(meta.integer(arch + ".expert_used_count", 0), c.n_experts_used, failed);
  if (failed) return *failed;
  const Architecture& a = c.architecture();
  if (c.n_experts != 0 && a.experts == Experts::never) {
    return Error(ErrorCode::architecture, name + ": architecture '" + arch + "' with " + std::to_string(c.n_experts) +
                                              " experts is not supported");
  }
  if (c.n_experts == 0 && a.experts == Experts::always) {
    return meta.error(arch + ".expert_count", "missing or 0, but architecture '" + arch + "' routes through experts");
  }
  if (c.n_experts == 0) c.n_experts_used = 0;  // a dense model's, ignored as llama.cpp ignores it
  if (!c.routed() || !a.own_expert_width || c.n_experts_used <= 0) return {};
  take(meta.integer(arch + ".expert_feed_forward_length", c.hidden_dim / c.n_experts_used), c.hidden_dim, failed);
  if (failed) return *failed;
  return {};
}

// What accord cannot run although the shapes fit: partial RoPE, values of
// another width than keys, soft-capped logits, a sliding-window pattern
// other than the architecture's.
Status check_supported(const MetadataReader& meta, const std::string& arch, const ModelConfig& c,
                       const std::string& name) {
  std::optional<Error> failed;
  int rope_dims = 0, value_width = 0;
  take(meta.integer(arch + ".rope.dimension_count", c.head_size()), rope_dims, failed);
  take(meta.integer(arch + ".attention.value_length", c.head_size()), value_width, failed);
  if (failed) return *failed;
  auto refuse = [&](const std::string& what) { return Error(ErrorCode::architecture, name + ": " + what); };
  if (rope_dims != c.head_size()) {
    return refuse("RoPE over " + std::to_string(rope_dims) + " of each head's " + std::to_string(c.head_size()) +
                  " dimensions is not supported");
  }
  if (value_width != c.head_size()) {
    return refuse("value heads of " + std::to_string(value_width) + " dimensions beside key heads of " +
                  std::to_string(c.head_size()) + " are not supported");
  }
  for (const char* key : {".final_logit_softcapping", ".attn_logit_softcapping", ".attention.sliding_window_pattern"}) {
    if (meta.has(arch + key)) return refuse("metadata " + arch + key + " is not supported");
  }
  return {};
}

// The architecture the file names, or why accord does not run it.
Result<Arch> read_architecture(const MetadataReader& meta, const std::string& name) {
  auto architecture = meta.text("general.architecture");
  if (!architecture) return architecture.error();
  if (is_unsupported_mixture_of_experts(*architecture)) {
    return Error(ErrorCode::architecture, name + ": architecture '" + *architecture +
                                              "' is a mixture of experts: mixture-of-experts models are not supported");
  }
  if (auto arch = find_architecture(*architecture)) return *arch;
  return Error(ErrorCode::architecture, name + ": architecture '" + *architecture + "' is not supported; accord runs " +
                                            supported_architectures());
}

// The RoPE factor tensors of the file, as the architecture takes them.
Result<RopeFactorNames> rope_factor_names(const gguf::File& file, const MetadataReader& meta, const ModelConfig& c) {
  switch (c.architecture().rope_factors) {
    case RopeFactors::none: return RopeFactorNames{};
    case RopeFactors::frequencies:
      return RopeFactorNames{file.tensor("rope_freqs.weight") ? "rope_freqs.weight" : "", ""};
    case RopeFactors::long_short: break;
  }
  if (file.tensor("rope_factors_long.weight") == nullptr) return RopeFactorNames{};
  auto original = meta.integer(std::string(c.architecture().name) + ".rope.scaling.original_context_length", c.seq_len);
  if (!original) return original.error();
  const bool longer = c.seq_len > *original;
  return RopeFactorNames{longer ? "rope_factors_long.weight" : "rope_factors_short.weight",
                         longer ? "rope_factors_short.weight" : "rope_factors_long.weight"};
}

Result<ModelConfig> read_config(const gguf::File& file, const std::string& name) {
  const MetadataReader meta(file, name);
  auto arch = read_architecture(meta, name);
  if (!arch) return arch.error();
  ModelConfig c;
  c.arch = *arch;
  const std::string prefix(c.architecture().name);
  if (Status ok = read_shape_keys(meta, prefix, c); !ok) return ok.error();
  if (Status ok = read_experts(meta, prefix, c, name); !ok) return ok.error();
  const gguf::TensorInfo* embedding = file.tensor("token_embd.weight");
  if (embedding == nullptr) return Error(ErrorCode::format, name + ": missing tensor token_embd.weight");
  if (embedding->shape.size() != 2 || embedding->shape[1] > (1u << 30)) {
    return Error(ErrorCode::format, name + ": token_embd.weight has shape " + shape_text(embedding->shape) +
                                        ", expected [embedding_length, vocabulary]");
  }
  c.vocab_size = static_cast<int>(embedding->shape[1]);
  c.shared_classifier = file.tensor("output.weight") == nullptr;
  if (Status valid = validate(c); !valid) return Error(ErrorCode::format, name + ": " + valid.error().message());
  if (Status ok = check_supported(meta, prefix, c, name); !ok) return ok.error();
  if (Status ok = read_rope_scaling(meta, prefix, c, name); !ok) return ok.error();
  auto factors = rope_factor_names(file, meta, c);
  if (!factors) return factors.error();
  c.rope_factors = !factors->used.empty();
  return c;
}

void decode(float* dst, const std::byte* src, TensorType type, std::size_t n) {
  cpu::dequantize_values(gguf::weight_type(type), dst, src, n);
}

// A norm weight stored as F32 aligned for floats is used where it lies;
// any other is decoded into the owned buffer. Matrices always stay where
// they lie, in their stored type.
bool read_in_place(const gguf::TensorInfo& t, std::span<const std::byte> bytes) {
  return t.type == TensorType::f32 && reinterpret_cast<std::uintptr_t>(bytes.data() + t.offset) % alignof(float) == 0;
}

// Every tensor the architecture needs, of the expected shape, and no other
// but `unused`.
Status check_tensors(const gguf::File& file, const std::vector<Slot>& slots, const std::string& unused,
                     const ModelConfig& c, const std::string& name) {
  std::unordered_set<std::string> expected = {unused};
  for (const Slot& slot : slots) {
    expected.insert(slot.name);
    const gguf::TensorInfo* t = file.tensor(slot.name);
    if (t == nullptr) return Error(ErrorCode::format, name + ": missing tensor " + slot.name);
    if (t->shape != slot.shape) {
      return Error(ErrorCode::format, name + ": tensor " + slot.name + " has shape " + shape_text(t->shape) +
                                          ", but the metadata implies " + shape_text(slot.shape));
    }
  }
  for (const auto& t : file.tensors) {
    if (expected.count(t.name) == 0) {
      return Error(ErrorCode::architecture, name + ": tensor " + t.name + " is not part of the " +
                                                std::string(c.architecture().name) + " architecture accord runs");
    }
  }
  return {};
}

// A header and the slots it implies, checked against the tensors.
struct Layout {
  ModelHeader header;
  std::vector<Slot> slots;
};

Result<Layout> read_layout(const gguf::File& file, const std::string& name) {
  auto config = read_config(file, name);
  if (!config) return config.error();
  // Read once by read_config already, so it does not fail here.
  const RopeFactorNames factors = *rope_factor_names(file, MetadataReader(file, name), *config);
  Layout layout{{*config, "gguf-v" + std::to_string(file.version)}, gguf_slots(*config, factors.used)};
  if (Status ok = check_tensors(file, layout.slots, factors.unused, *config, name); !ok) return ok.error();
  return layout;
}

// Points the weights of `slot` at tensor `t`: a matrix (or a fused one's
// parts, by rows) where it lies; a vector where it lies when read_in_place,
// else decoded at `owned` unless that is null (outside the scope).
void place(const Slot& slot, const gguf::TensorInfo& t, std::span<const std::byte> bytes, ModelContents& contents,
           float* owned) {
  const WeightSlot first = weight_slot(contents.weights, slot.ids.front());
  if (first.vector != nullptr) {
    if (read_in_place(t, bytes)) {
      *first.vector = reinterpret_cast<const float*>(bytes.data() + t.offset);
    } else if (owned != nullptr) {
      decode(owned, bytes.data() + t.offset, t.type, static_cast<std::size_t>(t.elements));
      *first.vector = owned;
    }
    return;
  }
  // A 3-D tensor (experts) is its experts' matrices one after another.
  std::uint64_t all_rows = 1;
  for (std::size_t d = 1; d < t.shape.size(); ++d) all_rows *= t.shape[d];
  const cpu::Matrix whole{weight_type(t.type), bytes.data() + t.offset, static_cast<int>(all_rows),
                          static_cast<int>(t.shape[0])};
  int row = 0;
  for (const WeightId& id : slot.ids) {
    cpu::Matrix& m = *weight_slot(contents.weights, id).matrix;
    const int rows = slot.ids.size() == 1 ? whole.rows : part_rows(contents.config, id.kind);
    m = {whole.type, whole.row(row), rows, whole.cols};
    row += rows;
  }
}

}  // namespace

Result<ModelHeader> read_gguf_header(const gguf::File& file, const std::string& name) {
  auto layout = read_layout(file, name);
  if (!layout) return layout.error();
  return layout->header;
}

Result<ModelContents> read_gguf_model(const gguf::File& file, std::span<const std::byte> bytes, const std::string& name,
                                      const ModelLoad& load) {
  auto layout = read_layout(file, name);
  if (!layout) return layout.error();
  const ModelConfig& config = layout->header.config;
  ModelContents contents;
  contents.config = config;
  contents.format = layout->header.format;
  contents.weights.layers.resize(static_cast<std::size_t>(config.n_layers));

  // A vector outside the scope is never read: it stays null, and it is not
  // decoded, which would touch its page of the file.
  auto decoded = [&](const Slot& slot, const gguf::TensorInfo& t) {
    return vector_length(config, slot.ids.front().kind) > 0 && !read_in_place(t, bytes) &&
           load.scope.holds(config, slot.ids.front());
  };
  // The owned buffer is sized first, so pointers into it stay valid. Its
  // size is bounded by the tensors' bytes, which parse() found in the file.
  std::size_t owned = 0;
  for (const Slot& slot : layout->slots) {
    const gguf::TensorInfo& t = *file.tensor(slot.name);
    if (decoded(slot, t)) owned += static_cast<std::size_t>(t.elements);
  }
  contents.owned.resize(owned);
  std::size_t next = 0;
  for (const Slot& slot : layout->slots) {
    const gguf::TensorInfo& t = *file.tensor(slot.name);
    const bool decode_here = decoded(slot, t);
    place(slot, t, bytes, contents, decode_here ? contents.owned.data() + next : nullptr);
    if (decode_here) next += static_cast<std::size_t>(t.elements);
  }
  if (config.shared_classifier) contents.weights.classifier = contents.weights.token_embedding;
  for (const auto& t : file.tensors) {
    contents.tensors.push_back({t.name, std::string(gguf::to_string(t.type)), t.shape, t.offset, t.bytes});
  }
  contents.config.seq_len = fitted_context(config.seq_len, load);
  if (Status ok = identify(contents, bytes, name, namer(layout->slots), load); !ok) return ok.error();
  return contents;
}

gguf::Metadata llama_metadata(const ModelConfig& c) {
  auto u32 = [](int v) { return Value::unsigned_int(ValueType::u32, static_cast<std::uint64_t>(v)); };
  auto f32 = [](float v) { return Value::floating(ValueType::f32, v); };
  gguf::Metadata metadata = {{"general.architecture", Value::string("llama")},
                             {"general.alignment", u32(static_cast<int>(gguf::kDefaultAlignment))},
                             {"llama.vocab_size", u32(c.vocab_size)},
                             {"llama.context_length", u32(c.seq_len)},
                             {"llama.embedding_length", u32(c.dim)},
                             {"llama.feed_forward_length", u32(c.hidden_dim)},
                             {"llama.block_count", u32(c.n_layers)},
                             {"llama.attention.head_count", u32(c.n_heads)},
                             {"llama.attention.head_count_kv", u32(c.n_kv_heads)},
                             {"llama.rope.dimension_count", u32(c.head_size())},
                             {"llama.rope.freq_base", f32(c.rope_theta)},
                             {"llama.attention.layer_norm_rms_epsilon", f32(c.norm_eps)}};
  if (c.routed()) {
    metadata.emplace_back("llama.expert_count", u32(c.n_experts));
    metadata.emplace_back("llama.expert_used_count", u32(c.n_experts_used));
  }
  return metadata;
}

namespace {

// llama.cpp's llama_ftype for a file whose matrices are `type`.
int file_type(TensorType type) {
  switch (type) {
    case TensorType::f32: return 0;
    case TensorType::f16: return 1;
    case TensorType::q4_0: return 2;
    case TensorType::q4_1: return 3;
    case TensorType::q5_0: return 8;
    case TensorType::q5_1: return 9;
    case TensorType::iq4_nl: return 25;
    case TensorType::q8_0: return 7;
    case TensorType::q2_k: return 10;
    case TensorType::q3_k: return 11;  // the _S of each, the closest to one type
    case TensorType::q4_k: return 14;
    case TensorType::q5_k: return 16;
    case TensorType::q6_k: return 18;
    case TensorType::iq4_xs: return 30;
    case TensorType::bf16: return 32;
  }
  return 0;
}

std::vector<std::byte> encode(const float* src, std::size_t n, TensorType type) {
  std::vector<std::byte> out(static_cast<std::size_t>(gguf::tensor_bytes(type, n)));
  cpu::quantize_values(gguf::weight_type(type), out.data(), src, n);
  return out;
}

void set(gguf::Metadata& metadata, const std::string& key, Value value) {
  for (auto& [k, v] : metadata) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata.emplace_back(key, std::move(value));
}

}  // namespace

Status write_gguf_model(const std::string& path, const Model& model, gguf::Metadata metadata, TensorType type) {
  return write_gguf_model(
      path, model, std::move(metadata), [type](const std::string&) { return type; }, file_type(type));
}

Status write_gguf_model(const std::string& path, const Model& model, gguf::Metadata metadata, const MatrixTypes& types,
                        int file_type) {
  const ModelConfig& c = model.config();
  if (c.arch != Arch::llama || c.head_dim > 0 || c.routed()) {
    return Error(ErrorCode::architecture, "writing GGUF files is only supported for dense llama models, not '" +
                                              std::string(c.architecture().name) + "'" +
                                              (c.routed() ? " with experts" : ""));
  }
  set(metadata, "general.file_type", Value::unsigned_int(ValueType::u32, static_cast<std::uint64_t>(file_type)));
  ModelWeights weights = model.weights();
  std::vector<gguf::TensorData> tensors;
  for (const Slot& slot : gguf_slots(c, "rope_freqs.weight")) {
    std::uint64_t n = 1;
    for (std::uint64_t extent : slot.shape) n *= extent;
    const WeightSlot weight = weight_slot(weights, slot.ids.front());
    // Rows that do not split into 32-value blocks fall back to F16, as
    // llama.cpp falls back to another type for them; a K-quant's
    // super-blocks of 256 have no such fallback here.
    TensorType stored = weight.matrix != nullptr ? types(slot.name) : TensorType::f32;
    if (slot.shape[0] % gguf::block_size(stored) != 0) {
      if (cpu::is_k_quant(gguf::weight_type(stored))) {
        return Error(ErrorCode::contract, "cannot write " + slot.name + " as " + std::string(gguf::to_string(stored)) +
                                              ": its rows of " + std::to_string(slot.shape[0]) +
                                              " values are not whole super-blocks of 256");
      }
      stored = TensorType::f16;
    }
    if (weight.vector != nullptr) {
      tensors.push_back({slot.name, slot.shape, stored, encode(*weight.vector, static_cast<std::size_t>(n), stored)});
      continue;
    }
    std::vector<float> values(static_cast<std::size_t>(n));
    cpu::dequantize(*weight.matrix, values.data());
    tensors.push_back({slot.name, slot.shape, stored, encode(values.data(), values.size(), stored)});
  }
  return gguf::write(path, metadata, tensors);
}

Status write_gguf_weights(const std::string& path, const ModelConfig& c, const WeightFill& fill) {
  if (c.arch != Arch::llama || c.head_dim > 0 || c.rope_factors) {
    return Error(ErrorCode::architecture,
                 "synthetic GGUF files are plain llama models, not '" + std::string(c.architecture().name) + "'");
  }
  if (Status ok = validate(c); !ok) return ok;
  gguf::Metadata metadata = llama_metadata(c);
  set(metadata, "general.file_type", Value::unsigned_int(ValueType::u32, 0));
  std::vector<gguf::TensorData> tensors;
  for (const Slot& slot : gguf_slots(c, "rope_freqs.weight")) {
    ACCORD_ASSERT(slot.ids.size() == 1, "a plain llama's tensors are not fused");
    std::uint64_t n = 1;
    for (std::uint64_t extent : slot.shape) n *= extent;
    std::vector<float> values(static_cast<std::size_t>(n));
    fill(slot.ids.front(), values.data(), values.size());
    tensors.push_back({slot.name, slot.shape, TensorType::f32, encode(values.data(), values.size(), TensorType::f32)});
  }
  return gguf::write(path, metadata, tensors);
}

}  // namespace accord
