#include "runtime/model/model.hpp"

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

// The floats of a matrix: where they lie for aligned F32, else decoded into
// `scratch`.
const float* floats_of(const cpu::Matrix& m, std::vector<float>& scratch) {
  if (m.type == cpu::WeightType::f32 && reinterpret_cast<std::uintptr_t>(m.data) % alignof(float) == 0) {
    return reinterpret_cast<const float*>(m.data);
  }
  scratch.resize(static_cast<std::size_t>(m.rows) * m.cols);
  cpu::dequantize(m, scratch.data());
  return scratch.data();
}

}  // namespace

void for_each_weight(const ModelConfig& c, const ModelWeights& w,
                     const std::function<void(WeightId id, const float* data, std::size_t count)>& fn) {
  const std::size_t D = c.dim;
  using K = WeightKind;
  std::vector<float> scratch;
  auto matrix = [&](WeightId id, const cpu::Matrix& m) {
    fn(id, floats_of(m, scratch), static_cast<std::size_t>(m.rows) * m.cols);
  };
  matrix({K::token_embedding}, w.token_embedding);
  for (std::size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    const int layer = static_cast<int>(i);
    fn({K::rms_att, layer}, l.rms_att, D);
    matrix({K::wq, layer}, l.wq);
    matrix({K::wk, layer}, l.wk);
    matrix({K::wv, layer}, l.wv);
    matrix({K::wo, layer}, l.wo);
    fn({K::rms_ffn, layer}, l.rms_ffn, D);
    matrix({K::w1, layer}, l.w1);
    matrix({K::w2, layer}, l.w2);
    matrix({K::w3, layer}, l.w3);
  }
  fn({K::rms_final}, w.rms_final, D);
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
