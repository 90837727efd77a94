#include "runtime/model/gguf_model.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_set>

#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/quant.hpp"
#include "runtime/model/identity.hpp"

namespace accord {

namespace {

using gguf::TensorType;
using gguf::Value;
using gguf::ValueType;

// One tensor of the llama architecture: its GGUF name, its ggml shape
// (input features first) and the weight it fills: a norm (floats) or a
// matrix (kept in its stored type). The reader and the writer both walk
// this list, so they cannot disagree.
struct Slot {
  WeightId id;
  std::string name;
  std::vector<std::uint64_t> shape;
  const float** norm = nullptr;
  cpu::Matrix* matrix = nullptr;
};

// GGUF's (llama.cpp's) name of a weight, e.g. "blk.3.attn_q.weight".
std::string tensor_name(WeightId id) {
  static const char* const names[] = {"token_embd", "attn_norm", "attn_q",   "attn_k", "attn_v",      "attn_output",
                                      "ffn_norm",   "ffn_gate",  "ffn_down", "ffn_up", "output_norm", "output"};
  const std::string block = id.layer < 0 ? "" : "blk." + std::to_string(id.layer) + ".";
  return block + names[static_cast<std::size_t>(id.kind)] + ".weight";
}

std::vector<Slot> llama_slots(const ModelConfig& c, ModelWeights& w, bool with_output) {
  const auto D = static_cast<std::uint64_t>(c.dim), H = static_cast<std::uint64_t>(c.hidden_dim);
  const auto KV = static_cast<std::uint64_t>(c.kv_dim()), V = static_cast<std::uint64_t>(c.vocab_size);
  using K = WeightKind;
  auto slot = [](WeightId id, std::vector<std::uint64_t> shape, const float** norm, cpu::Matrix* matrix) {
    return Slot{id, tensor_name(id), std::move(shape), norm, matrix};
  };
  std::vector<Slot> slots = {slot({K::token_embedding}, {D, V}, nullptr, &w.token_embedding)};
  for (std::size_t l = 0; l < w.layers.size(); ++l) {
    LayerWeights& layer = w.layers[l];
    const int i = static_cast<int>(l);
    slots.push_back(slot({K::rms_att, i}, {D}, &layer.rms_att, nullptr));
    slots.push_back(slot({K::wq, i}, {D, D}, nullptr, &layer.wq));
    slots.push_back(slot({K::wk, i}, {D, KV}, nullptr, &layer.wk));
    slots.push_back(slot({K::wv, i}, {D, KV}, nullptr, &layer.wv));
    slots.push_back(slot({K::wo, i}, {D, D}, nullptr, &layer.wo));
    slots.push_back(slot({K::rms_ffn, i}, {D}, &layer.rms_ffn, nullptr));
    slots.push_back(slot({K::w1, i}, {D, H}, nullptr, &layer.w1));
    slots.push_back(slot({K::w2, i}, {H, D}, nullptr, &layer.w2));
    slots.push_back(slot({K::w3, i}, {D, H}, nullptr, &layer.w3));
  }
  slots.push_back(slot({K::rms_final}, {D}, &w.rms_final, nullptr));
  if (with_output) slots.push_back(slot({K::classifier}, {D, V}, nullptr, &w.classifier));
  return slots;
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

  Result<std::string> text(const std::string& key) const {
    const Value* value = file_.find(key);
    if (value == nullptr) return missing<std::string>(key, std::nullopt);
    auto v = value->as_string();
    if (!v) return error(key, v.error().message());
    return std::string(*v);
  }

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

// The llama.* keys that shape the model.
Status read_llama_keys(const MetadataReader& meta, ModelConfig& c) {
  std::optional<Error> failed;
  take(meta.integer("llama.embedding_length"), c.dim, failed);
  take(meta.integer("llama.feed_forward_length"), c.hidden_dim, failed);
  take(meta.integer("llama.block_count"), c.n_layers, failed);
  take(meta.integer("llama.attention.head_count"), c.n_heads, failed);
  take(meta.integer("llama.attention.head_count_kv", c.n_heads), c.n_kv_heads, failed);
  take(meta.integer("llama.context_length"), c.seq_len, failed);
  take(meta.positive_real("llama.attention.layer_norm_rms_epsilon", 1e-5f), c.norm_eps, failed);
  take(meta.positive_real("llama.rope.freq_base", 10000.0f), c.rope_theta, failed);
  if (failed) return *failed;
  return {};
}

// What accord cannot run although the shapes fit: experts, partial RoPE.
Status check_supported(const MetadataReader& meta, const ModelConfig& c, const std::string& name) {
  std::optional<Error> failed;
  int experts = 0, rope_dims = 0;
  take(meta.integer("llama.expert_count", 0), experts, failed);
  take(meta.integer("llama.rope.dimension_count", c.head_size()), rope_dims, failed);
  if (failed) return *failed;
  if (experts > 0) return Error(ErrorCode::architecture, name + ": mixture-of-experts models are not supported");
  if (rope_dims != c.head_size()) {
    return Error(ErrorCode::architecture, name + ": RoPE over " + std::to_string(rope_dims) + " of each head's " +
                                              std::to_string(c.head_size()) + " dimensions is not supported");
  }
  return {};
}

Result<ModelConfig> read_config(const gguf::File& file, const std::string& name) {
  const MetadataReader meta(file, name);
  auto architecture = meta.text("general.architecture");
  if (!architecture) return architecture.error();
  if (*architecture != "llama") {
    return Error(ErrorCode::architecture,
                 name + ": architecture '" + *architecture + "' is not supported; accord runs llama models");
  }
  ModelConfig c;
  if (Status ok = read_llama_keys(meta, c); !ok) return ok.error();
  const gguf::TensorInfo* embedding = file.tensor("token_embd.weight");
  if (embedding == nullptr) return Error(ErrorCode::format, name + ": missing tensor token_embd.weight");
  if (embedding->shape.size() != 2 || embedding->shape[1] > (1u << 30)) {
    return Error(ErrorCode::format, name + ": token_embd.weight has shape " + shape_text(embedding->shape) +
                                        ", expected [embedding_length, vocabulary]");
  }
  c.vocab_size = static_cast<int>(embedding->shape[1]);
  c.shared_classifier = file.tensor("output.weight") == nullptr;
  if (Status valid = validate(c); !valid) return Error(ErrorCode::format, name + ": " + valid.error().message());
  if (Status ok = check_supported(meta, c, name); !ok) return ok.error();
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

// Every tensor the architecture needs, of the expected shape, and no other.
Status check_tensors(const gguf::File& file, const std::vector<Slot>& slots, const std::string& name) {
  std::unordered_set<std::string> expected;
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
      return Error(ErrorCode::architecture,
                   name + ": tensor " + t.name + " is not part of the llama architecture accord runs");
    }
  }
  return {};
}

}  // namespace

Result<ModelHeader> read_gguf_header(const gguf::File& file, const std::string& name) {
  auto config = read_config(file, name);
  if (!config) return config.error();
  // The slots' names and shapes are checked; nothing is pointed anywhere.
  ModelWeights unused;
  unused.layers.resize(static_cast<std::size_t>(config->n_layers));
  if (Status ok = check_tensors(file, llama_slots(*config, unused, !config->shared_classifier), name); !ok) {
    return ok.error();
  }
  return ModelHeader{*config, "gguf-v" + std::to_string(file.version)};
}

Result<ModelContents> read_gguf_model(const gguf::File& file, std::span<const std::byte> bytes, const std::string& name,
                                      const ModelLoad& load) {
  auto header = read_gguf_header(file, name);
  if (!header) return header.error();
  const ModelConfig& config = header->config;
  ModelContents contents;
  contents.config = config;
  contents.format = header->format;
  contents.weights.layers.resize(static_cast<std::size_t>(config.n_layers));
  const auto slots = llama_slots(config, contents.weights, !config.shared_classifier);

  // A norm outside the scope is never read: it stays null, and it is not
  // decoded, which would touch its page of the file.
  auto decoded = [&](const Slot& slot, const gguf::TensorInfo& t) {
    return slot.norm != nullptr && !read_in_place(t, bytes) && load.scope.holds(config, slot.id);
  };
  // The owned buffer is sized first, so pointers into it stay valid. Its
  // size is bounded by the tensors' bytes, which parse() found in the file.
  std::size_t owned = 0;
  for (const Slot& slot : slots) {
    const gguf::TensorInfo& t = *file.tensor(slot.name);
    if (decoded(slot, t)) owned += static_cast<std::size_t>(t.elements);
  }
  contents.owned.resize(owned);
  std::size_t next = 0;
  for (const Slot& slot : slots) {
    const gguf::TensorInfo& t = *file.tensor(slot.name);
    if (slot.matrix != nullptr) {
      *slot.matrix = {weight_type(t.type), bytes.data() + t.offset, static_cast<int>(t.shape[1]),
                      static_cast<int>(t.shape[0])};
    } else if (read_in_place(t, bytes)) {
      *slot.norm = reinterpret_cast<const float*>(bytes.data() + t.offset);
    } else if (decoded(slot, t)) {
      decode(contents.owned.data() + next, bytes.data() + t.offset, t.type, static_cast<std::size_t>(t.elements));
      *slot.norm = contents.owned.data() + next;
      next += static_cast<std::size_t>(t.elements);
    }
  }
  if (config.shared_classifier) contents.weights.classifier = contents.weights.token_embedding;
  for (const auto& t : file.tensors) {
    contents.tensors.push_back({t.name, std::string(gguf::to_string(t.type)), t.shape, t.offset, t.bytes});
  }
  if (Status ok = identify(contents, bytes, name, tensor_name, load); !ok) return ok.error();
  return contents;
}

gguf::Metadata llama_metadata(const ModelConfig& c) {
  auto u32 = [](int v) { return Value::unsigned_int(ValueType::u32, static_cast<std::uint64_t>(v)); };
  auto f32 = [](float v) { return Value::floating(ValueType::f32, v); };
  return {{"general.architecture", Value::string("llama")},
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
}

namespace {

// llama.cpp's llama_ftype for a file whose matrices are `type`.
int file_type(TensorType type) {
  switch (type) {
    case TensorType::f32: return 0;
    case TensorType::f16: return 1;
    case TensorType::q4_0: return 2;
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
  set(metadata, "general.file_type", Value::unsigned_int(ValueType::u32, static_cast<std::uint64_t>(file_type)));
  ModelWeights weights = model.weights();
  const ModelConfig& c = model.config();
  std::vector<gguf::TensorData> tensors;
  for (const Slot& slot : llama_slots(c, weights, !c.shared_classifier)) {
    std::uint64_t n = 1;
    for (std::uint64_t extent : slot.shape) n *= extent;
    // Rows that do not split into 32-value blocks fall back to F16, as
    // llama.cpp falls back to another type for them; a K-quant's
    // super-blocks of 256 have no such fallback here.
    TensorType stored = slot.matrix != nullptr ? types(slot.name) : TensorType::f32;
    if (slot.shape[0] % gguf::block_size(stored) != 0) {
      if (cpu::is_k_quant(gguf::weight_type(stored))) {
        return Error(ErrorCode::contract, "cannot write " + slot.name + " as " + std::string(gguf::to_string(stored)) +
                                              ": its rows of " + std::to_string(slot.shape[0]) +
                                              " values are not whole super-blocks of 256");
      }
      stored = TensorType::f16;
    }
    if (slot.norm != nullptr) {
      tensors.push_back({slot.name, slot.shape, stored, encode(*slot.norm, static_cast<std::size_t>(n), stored)});
      continue;
    }
    std::vector<float> values(static_cast<std::size_t>(n));
    cpu::dequantize(*slot.matrix, values.data());
    tensors.push_back({slot.name, slot.shape, stored, encode(values.data(), values.size(), stored)});
  }
  return gguf::write(path, metadata, tensors);
}

}  // namespace accord
