#include "runtime/model/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "kernels/cpu/matmul.hpp"
#include "runtime/model/gguf.hpp"
#include "runtime/model/gguf_model.hpp"
#include "runtime/model/llama2c.hpp"
#include "runtime/model/weights.hpp"

namespace accord {

namespace {

Status check_range(const char* name, long long value, long long max) {
  if (value < 1 || value > max) {
    return Error(ErrorCode::format,
                 std::string(name) + " is " + std::to_string(value) + ", expected 1.." + std::to_string(max));
  }
  return {};
}

// Experts: none, or up to kMaxExperts of which 1..n_experts route each
// token, so that a stacked expert matrix's rows fit an int.
Status validate_experts(const ModelConfig& c) {
  constexpr int kMaxExperts = 512;  // llama.cpp's LLAMA_MAX_EXPERTS
  if (c.n_experts == 0 && c.n_experts_used == 0) return {};
  if (Status s = check_range("expert_count", c.n_experts, kMaxExperts); !s) return s;
  return check_range("expert_used_count", c.n_experts_used, c.n_experts);
}

}  // namespace

bool WeightScope::holds(const ModelConfig& config, WeightId id) const {
  if (is_expert_stack(config, id.kind) && !experts.empty()) return experts_of(id.layer, config.n_experts).count > 0;
  switch (id.kind) {
    case WeightKind::token_embedding: return embedding || (head && config.shared_classifier);
    case WeightKind::rms_final:
    case WeightKind::classifier: return head;
    case WeightKind::rope_factors: return units > 0 && first_unit < config.n_layers;
    default: return id.layer >= first_unit && id.layer - first_unit < units;
  }
}

bool WeightScope::holds_everything(const ModelConfig& config) const {
  return embedding && head && first_unit == 0 && units >= config.n_layers && experts.empty();
}

ExpertRange WeightScope::experts_of(int unit, int experts_per_block) const {
  if (experts.empty()) {
    const bool held = unit >= first_unit && unit - first_unit < units;
    return {0, held ? experts_per_block : 0};
  }
  return unit >= 0 && static_cast<std::size_t>(unit) < experts.size() ? experts[static_cast<std::size_t>(unit)]
                                                                      : ExpertRange{};
}

std::vector<WeightId> canonical_weights(const ModelConfig& c) {
  using K = WeightKind;
  const Architecture& a = c.architecture();
  std::vector<WeightId> ids = {{K::token_embedding}};
  if (c.rope_factors) ids.push_back({K::rope_factors});
  for (int layer = 0; layer < c.n_layers; ++layer) {
    auto add = [&](std::initializer_list<K> kinds) {
      for (K kind : kinds) ids.push_back({kind, layer});
    };
    add({K::rms_att, K::wq, K::wk, K::wv});
    if (a.qkv_bias) add({K::bq, K::bk, K::bv});
    if (a.qk_norm) add({K::q_norm, K::k_norm});
    add({K::wo});
    if (a.post_norms) add({K::post_att_norm});
    add({K::rms_ffn});
    if (c.routed()) add({K::router});
    add({K::w1, K::w2, K::w3});
    if (a.post_norms) add({K::post_ffn_norm});
  }
  ids.push_back({K::rms_final});
  if (!c.shared_classifier) ids.push_back({K::classifier});
  return ids;
}

std::size_t vector_length(const ModelConfig& c, WeightKind kind) {
  switch (kind) {
    case WeightKind::rms_att:
    case WeightKind::rms_ffn:
    case WeightKind::rms_final:
    case WeightKind::post_att_norm:
    case WeightKind::post_ffn_norm: return static_cast<std::size_t>(c.dim);
    case WeightKind::bq: return static_cast<std::size_t>(c.q_dim());
    case WeightKind::bk:
    case WeightKind::bv: return static_cast<std::size_t>(c.kv_dim());
    case WeightKind::q_norm:
    case WeightKind::k_norm: return static_cast<std::size_t>(c.head_size());
    case WeightKind::rope_factors: return static_cast<std::size_t>(c.head_size() / 2);
    default: return 0;
  }
}

WeightSlot weight_slot(ModelWeights& w, WeightId id) {
  using K = WeightKind;
  switch (id.kind) {
    case K::token_embedding: return {&w.token_embedding, nullptr};
    case K::rope_factors: return {nullptr, &w.rope_factors};
    case K::rms_final: return {nullptr, &w.rms_final};
    case K::classifier: return {&w.classifier, nullptr};
    default: break;
  }
  LayerWeights& l = w.layers[static_cast<std::size_t>(id.layer)];
  switch (id.kind) {
    case K::wq: return {&l.wq, nullptr};
    case K::wk: return {&l.wk, nullptr};
    case K::wv: return {&l.wv, nullptr};
    case K::wo: return {&l.wo, nullptr};
    case K::w1: return {&l.w1, nullptr};
    case K::w2: return {&l.w2, nullptr};
    case K::w3: return {&l.w3, nullptr};
    case K::router: return {&l.router, nullptr};
    case K::rms_att: return {nullptr, &l.rms_att};
    case K::rms_ffn: return {nullptr, &l.rms_ffn};
    case K::bq: return {nullptr, &l.bq};
    case K::bk: return {nullptr, &l.bk};
    case K::bv: return {nullptr, &l.bv};
    case K::q_norm: return {nullptr, &l.q_norm};
    case K::k_norm: return {nullptr, &l.k_norm};
    case K::post_att_norm: return {nullptr, &l.post_att_norm};
    default: return {nullptr, &l.post_ffn_norm};
  }
}

namespace {

// The rows of `matrix`, weight `id`, that `scope` holds: of an expert
// stack, whose rows are its experts' one after another, the held experts'.
std::pair<int, int> held_rows(const ModelConfig& c, const WeightScope& scope, WeightId id, const cpu::Matrix& matrix) {
  if (!is_expert_stack(c, id.kind)) return {0, matrix.rows};
  const int expert_rows = matrix.rows / c.n_experts;
  const ExpertRange held = scope.experts_of(id.layer, c.n_experts);
  return {held.first * expert_rows, held.count * expert_rows};
}

}  // namespace

std::vector<WeightTensor> weight_tensors(const ModelConfig& c, const ModelWeights& w, const WeightScope& scope) {
  std::vector<WeightTensor> tensors;
  // weight_slot only locates; nothing is written through it here.
  auto& weights = const_cast<ModelWeights&>(w);
  for (const WeightId& id : canonical_weights(c)) {
    if (!scope.holds(c, id)) continue;
    const WeightSlot slot = weight_slot(weights, id);
    if (slot.matrix != nullptr) {
      const auto [first_row, rows] = held_rows(c, scope, id, *slot.matrix);
      tensors.push_back({id, slot.matrix, nullptr, 0, first_row, rows});
    } else {
      tensors.push_back({id, nullptr, *slot.vector, vector_length(c, id.kind)});
    }
  }
  return tensors;
}

namespace {

// Floats dequantized at a time: 256 KiB, whole rows.
constexpr std::size_t kPieceFloats = 1 << 16;

}  // namespace

void for_each_piece(const WeightTensor& tensor, std::vector<float>& scratch,
                    const std::function<void(const WeightPiece& piece)>& fn) {
  if (tensor.matrix == nullptr) {
    fn({tensor.id, tensor.vector, tensor.length, 0, tensor.length});
    return;
  }
  const cpu::Matrix& m = *tensor.matrix;
  const auto cols = static_cast<std::size_t>(m.cols);
  const std::size_t total = static_cast<std::size_t>(m.rows) * cols;
  const bool in_place =
      m.type == cpu::WeightType::f32 && reinterpret_cast<std::uintptr_t>(m.data) % alignof(float) == 0;
  const int rows_per_piece = static_cast<int>(std::max<std::size_t>(1, kPieceFloats / cols));
  const int end = tensor.first_row + tensor.rows;
  for (int row = tensor.first_row; row < end; row += rows_per_piece) {
    const int rows = std::min(rows_per_piece, end - row);
    const std::size_t first = static_cast<std::size_t>(row) * cols, count = static_cast<std::size_t>(rows) * cols;
    if (in_place) {
      fn({tensor.id, reinterpret_cast<const float*>(m.data) + first, count, first, total});
      continue;
    }
    scratch.resize(count);
    for (int r = 0; r < rows; ++r) cpu::dequantize_row(m, row + r, scratch.data() + static_cast<std::size_t>(r) * cols);
    fn({tensor.id, scratch.data(), count, first, total});
  }
}

void for_each_weight(const ModelConfig& c, const ModelWeights& w,
                     const std::function<void(const WeightPiece& piece)>& fn) {
  std::vector<float> scratch;
  for (const WeightTensor& tensor : weight_tensors(c, w)) for_each_piece(tensor, scratch, fn);
}

std::map<std::string, std::uint64_t> Model::weight_bytes_by_type(const WeightScope& scope) const {
  std::map<std::string, std::uint64_t> bytes;
  for (const WeightTensor& t : weight_tensors(config(), weights(), scope)) {
    bytes[t.matrix != nullptr ? cpu::to_string(t.matrix->type) : "F32"] += t.bytes();
  }
  return bytes;
}

namespace {

bool is_embedding(const StoredTensor& t) { return t.name == "token_embd.weight" || t.name == "token_embedding_table"; }
// llama2.c's RoPE tables: stored, never read (RoPE is computed).
bool is_rope_table(const StoredTensor& t) { return t.name.starts_with("freq_cis_"); }
// A block's experts' gate, up or down matrices, one after another.
bool is_expert_stack(const StoredTensor& t) { return t.name.ends_with("_exps.weight"); }

}  // namespace

std::uint64_t decode_weight_bytes(const Model& model) {
  const ModelConfig& c = model.config();
  std::uint64_t bytes = 0;
  for (const StoredTensor& t : model.tensors()) {
    if (is_rope_table(t)) continue;
    if (is_expert_stack(t) && c.routed()) {
      bytes += t.bytes / static_cast<std::uint64_t>(c.n_experts) * static_cast<std::uint64_t>(c.n_experts_used);
      continue;
    }
    const bool one_row = is_embedding(t) && !c.shared_classifier;
    bytes += one_row ? t.bytes / static_cast<std::uint64_t>(c.vocab_size) : t.bytes;
  }
  return bytes;
}

std::optional<ByteRange> tensor_range(const WeightTensor& tensor, std::span<const std::byte> bytes) {
  const auto* data = tensor.matrix != nullptr ? tensor.matrix->row(tensor.first_row)
                                              : reinterpret_cast<const std::byte*>(tensor.vector);
  const std::size_t length = tensor.bytes();
  const std::byte* begin = bytes.data();
  if (data == nullptr || begin == nullptr || data < begin || data + length > begin + bytes.size()) return std::nullopt;
  return ByteRange{static_cast<std::size_t>(data - begin), length};
}

std::vector<ByteRange> tensor_ranges(const std::vector<WeightTensor>& tensors, std::span<const std::byte> bytes) {
  std::vector<ByteRange> ranges;
  for (const WeightTensor& t : tensors) {
    if (auto range = tensor_range(t, bytes)) ranges.push_back(*range);
  }
  std::sort(ranges.begin(), ranges.end(), [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
  std::vector<ByteRange> merged;
  for (const ByteRange& r : ranges) {
    const std::size_t end = r.offset + r.length;
    if (!merged.empty() && r.offset <= merged.back().offset + merged.back().length) {
      merged.back().length = std::max(merged.back().offset + merged.back().length, end) - merged.back().offset;
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

std::vector<ByteRange> Model::file_ranges(const WeightScope& scope) const {
  return tensor_ranges(weight_tensors(config(), weights(), scope), file_.bytes());
}

Model::Model(ModelContents contents, MappedFile file)
    : contents_(std::make_unique<ModelContents>(std::move(contents))), file_(std::move(file)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

const ModelConfig& Model::config() const { return contents_->config; }
const ModelWeights& Model::weights() const { return contents_->weights; }
const std::string& Model::format() const { return contents_->format; }
const std::string& Model::identity() const { return contents_->identity; }
const std::vector<std::string>& Model::tensor_digests() const { return contents_->tensor_digests; }
const WeightScope& Model::scope() const { return contents_->scope; }
const std::vector<StoredTensor>& Model::tensors() const { return contents_->tensors; }
std::size_t Model::owned_floats() const { return contents_->owned.size(); }

std::size_t Model::resident_bytes() const {
  const ByteRange whole{0, file_.size()};
  return file_.resident_bytes({&whole, 1}) + contents_->owned.size() * sizeof(float);
}

std::size_t Model::resident_bytes(const WeightScope& scope) const {
  std::size_t owned = 0;  // vectors the Model holds, not the file
  for (const WeightTensor& t : weight_tensors(config(), weights(), scope)) {
    if (!tensor_range(t, file_.bytes())) owned += t.length * sizeof(float);
  }
  return file_.resident_bytes(file_ranges(scope)) + owned;
}

int fitted_context(int file_context, const ModelLoad& load) {
  return load.context > 0 ? std::min(file_context, load.context) : file_context;
}

Status validate(const ModelConfig& c) {
  // Generous bounds: far above any Llama-family model, low enough that the
  // product of any two or three of them cannot overflow 64 bits.
  const struct {
    const char* name;
    int value;
    int max;
  } fields[] = {
      {"dim", c.dim, 1 << 16},         {"hidden_dim", c.hidden_dim, 1 << 18}, {"n_layers", c.n_layers, 1 << 10},
      {"n_heads", c.n_heads, 1 << 12}, {"n_kv_heads", c.n_kv_heads, 1 << 12}, {"vocab_size", c.vocab_size, 1 << 22},
      {"seq_len", c.seq_len, 1 << 20}};
  for (const auto& f : fields) {
    if (Status s = check_range(f.name, f.value, f.max); !s) return s;
  }
  if (c.head_dim == 0 && c.dim % c.n_heads != 0) {
    return Error(ErrorCode::format,
                 "dim " + std::to_string(c.dim) + " is not a multiple of n_heads " + std::to_string(c.n_heads));
  }
  if (Status s = check_range("head_dim", c.head_size(), 1 << 12); !s) return s;
  if (c.head_size() % 2 != 0) {
    return Error(ErrorCode::format, "head size " + std::to_string(c.head_size()) + " is odd; RoPE needs pairs");
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return Error(ErrorCode::format, "n_heads " + std::to_string(c.n_heads) + " is not a multiple of n_kv_heads " +
                                        std::to_string(c.n_kv_heads));
  }
  if (c.sliding_window < 0) return Error(ErrorCode::format, "sliding_window is " + std::to_string(c.sliding_window));
  if (Status s = validate_experts(c); !s) return s;
  for (const auto& [name, value] :
       {std::pair{"rope_theta", c.rope_theta}, std::pair{"norm_eps", c.norm_eps}, std::pair{"rope_scale", c.rope_scale},
        std::pair{"rope_freq_scale", c.rope_freq_scale}}) {
    if (!std::isfinite(value) || !(value > 0.0f)) {
      return Error(ErrorCode::format,
                   std::string(name) + " is " + std::to_string(value) + ", expected a finite positive number");
    }
  }
  return {};
}

Result<ModelContents> Model::read(std::span<const std::byte> bytes, const std::string& name, const ModelLoad& load) {
  if (!gguf::has_magic(bytes)) return llama2c::read(bytes, name, load);
  auto file = gguf::parse(bytes, name);
  if (!file) return file.error();
  return read_gguf_model(*file, bytes, name, load);
}

Result<ModelHeader> Model::read_header(const std::string& path) {
  auto file = MappedFile::open(path);
  if (!file) return file.error();
  // Only the pages of the header (and GGUF's metadata) are read from the mapping.
  if (!gguf::has_magic(file->bytes())) return llama2c::read_header(file->bytes(), path);
  auto parsed = gguf::parse(file->bytes(), path);
  if (!parsed) return parsed.error();
  return read_gguf_header(*parsed, path);
}

Result<Model> Model::load(const std::string& path, const ModelLoad& load) {
  auto file = MappedFile::open(path);
  if (!file) return file.error();
  ModelLoad mapped = load;
  mapped.mapped = true;
  auto contents = read(file->bytes(), path, mapped);
  if (!contents) return contents.error();
  return Model(std::move(*contents), std::move(*file));
}

}  // namespace accord
