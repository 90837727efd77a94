#include "runtime/model/model.hpp"

#include <cmath>
#include <utility>

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

void for_each_weight(const ModelConfig& c, const ModelWeights& w,
                     const std::function<void(WeightId id, const float* data, std::size_t count)>& fn) {
  const std::size_t D = c.dim, H = c.hidden_dim, KV = c.kv_dim(), V = c.vocab_size;
  using K = WeightKind;
  fn({K::token_embedding}, w.token_embedding, V * D);
  for (std::size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    const int layer = static_cast<int>(i);
    fn({K::rms_att, layer}, l.rms_att, D);
    fn({K::wq, layer}, l.wq, D * D);
    fn({K::wk, layer}, l.wk, KV * D);
    fn({K::wv, layer}, l.wv, KV * D);
    fn({K::wo, layer}, l.wo, D * D);
    fn({K::rms_ffn, layer}, l.rms_ffn, D);
    fn({K::w1, layer}, l.w1, H * D);
    fn({K::w2, layer}, l.w2, D * H);
    fn({K::w3, layer}, l.w3, H * D);
  }
  fn({K::rms_final}, w.rms_final, D);
  if (!c.shared_classifier) fn({K::classifier}, w.classifier, V * D);
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
