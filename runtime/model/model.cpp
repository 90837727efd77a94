#include "runtime/model/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "kernels/cpu/matmul.hpp"
#include "runtime/model/gguf.hpp"
#include "runtime/model/gguf_model.hpp"
#include "runtime/model/llama2c.hpp"

namespace accord {

namespace {

Status check_range(const char* name, long long value, long long max) {
  if (value < 1 || value > max) {
    return Error(ErrorCode::format, std::string(name) + " is " + std::to_string(value) + ", expected 1.." +
                                        std::to_string(max));
  }
  return {};
}

}  // namespace

namespace {

// Floats dequantized at a time: 256 KiB, whole rows.
constexpr std::size_t kPieceFloats = 1 << 16;

// Hands m to fn: where it lies for aligned F32, else in pieces of whole rows.
void matrix_pieces(WeightId id, const cpu::Matrix& m, const std::function<void(const WeightPiece&)>& fn,
                   std::vector<float>& scratch) {
  const auto cols = static_cast<std::size_t>(m.cols);
  const std::size_t total = static_cast<std::size_t>(m.rows) * cols;
  if (m.type == cpu::WeightType::f32 && reinterpret_cast<std::uintptr_t>(m.data) % alignof(float) == 0) {
    fn({id, reinterpret_cast<const float*>(m.data), total, 0, total});
    return;
  }
  const int rows_per_piece = static_cast<int>(std::max<std::size_t>(1, kPieceFloats / cols));
  for (int row = 0; row < m.rows; row += rows_per_piece) {
    const int rows = std::min(rows_per_piece, m.rows - row);
    scratch.resize(static_cast<std::size_t>(rows) * cols);
    for (int r = 0; r < rows; ++r) cpu::dequantize_row(m, row + r, scratch.data() + static_cast<std::size_t>(r) * cols);
    fn({id, scratch.data(), scratch.size(), static_cast<std::size_t>(row) * cols, total});
  }
}

}  // namespace

void for_each_weight(const ModelConfig& c, const ModelWeights& w,
                     const std::function<void(const WeightPiece& piece)>& fn) {
  const std::size_t D = c.dim;
  using K = WeightKind;
  std::vector<float> scratch;
  auto matrix = [&](WeightId id, const cpu::Matrix& m) { matrix_pieces(id, m, fn, scratch); };
  auto norm = [&](WeightId id, const float* data) { fn({id, data, D, 0, D}); };
  matrix({K::token_embedding}, w.token_embedding);
  for (std::size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    const int layer = static_cast<int>(i);
    norm({K::rms_att, layer}, l.rms_att);
    matrix({K::wq, layer}, l.wq);
    matrix({K::wk, layer}, l.wk);
    matrix({K::wv, layer}, l.wv);
    matrix({K::wo, layer}, l.wo);
    norm({K::rms_ffn, layer}, l.rms_ffn);
    matrix({K::w1, layer}, l.w1);
    matrix({K::w2, layer}, l.w2);
    matrix({K::w3, layer}, l.w3);
  }
  norm({K::rms_final}, w.rms_final);
  if (!c.shared_classifier) matrix({K::classifier}, w.classifier);
}

std::map<std::string, std::uint64_t> Model::weight_bytes_by_type() const {
  std::map<std::string, std::uint64_t> bytes;
  const ModelWeights& w = weights();
  auto add = [&](const cpu::Matrix& m) { bytes[cpu::to_string(m.type)] += m.bytes(); };
  add(w.token_embedding);
  for (const LayerWeights& l : w.layers) {
    for (const cpu::Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3}) add(*m);
  }
  if (!config().shared_classifier) add(w.classifier);
  const auto norms = static_cast<std::uint64_t>(2 * config().n_layers + 1) * config().dim;
  bytes["F32"] += norms * sizeof(float);
  return bytes;
}

Status validate(const ModelConfig& c) {
  // Generous bounds: far above any Llama-family model, low enough that the
  // product of any two or three of them cannot overflow 64 bits.
  const struct {
    const char* name;
    int value;
    int max;
  } fields[] = {{"dim", c.dim, 1 << 16},           {"hidden_dim", c.hidden_dim, 1 << 18},
                {"n_layers", c.n_layers, 1 << 10}, {"n_heads", c.n_heads, 1 << 12},
                {"n_kv_heads", c.n_kv_heads, 1 << 12}, {"vocab_size", c.vocab_size, 1 << 22},
                {"seq_len", c.seq_len, 1 << 20}};
  for (const auto& f : fields) {
    if (Status s = check_range(f.name, f.value, f.max); !s) return s;
  }
  if (c.dim % c.n_heads != 0) {
    return Error(ErrorCode::format, "dim " + std::to_string(c.dim) + " is not a multiple of n_heads " +
                                        std::to_string(c.n_heads));
  }
  if (c.head_size() % 2 != 0) {
    return Error(ErrorCode::format, "head size " + std::to_string(c.head_size()) + " is odd; RoPE needs pairs");
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return Error(ErrorCode::format, "n_heads " + std::to_string(c.n_heads) + " is not a multiple of n_kv_heads " +
                                        std::to_string(c.n_kv_heads));
  }
  for (const auto& [name, value] : {std::pair{"rope_theta", c.rope_theta}, std::pair{"norm_eps", c.norm_eps}}) {
    if (!std::isfinite(value) || !(value > 0.0f)) {
      return Error(ErrorCode::format,
                   std::string(name) + " is " + std::to_string(value) + ", expected a finite positive number");
    }
  }
  return {};
}

Result<ModelContents> Model::read(std::span<const std::byte> bytes, const std::string& name) {
  if (!gguf::has_magic(bytes)) return llama2c::read(bytes, name);
  auto file = gguf::parse(bytes, name);
  if (!file) return file.error();
  return read_gguf_model(*file, bytes, name);
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

Result<Model> Model::load(const std::string& path) {
  auto file = MappedFile::open(path);
  if (!file) return file.error();
  auto contents = read(file->bytes(), path);
  if (!contents) return contents.error();
  return Model(std::move(*contents), std::move(*file));
}

}  // namespace accord
