#include "runtime/model/model.hpp"

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
                     const std::function<void(const float* data, std::size_t count)>& fn) {
  const std::size_t D = c.dim, H = c.hidden_dim, KV = c.kv_dim(), V = c.vocab_size;
  fn(w.token_embedding, V * D);
  for (const LayerWeights& l : w.layers) {
    fn(l.rms_att, D);
    fn(l.wq, D * D);
    fn(l.wk, KV * D);
    fn(l.wv, KV * D);
    fn(l.wo, D * D);
    fn(l.rms_ffn, D);
    fn(l.w1, H * D);
    fn(l.w2, D * H);
    fn(l.w3, H * D);
  }
  fn(w.rms_final, D);
  if (!c.shared_classifier) fn(w.classifier, V * D);
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
  if (!(c.rope_theta > 0.0f) || !(c.norm_eps > 0.0f)) {
    return Error(ErrorCode::format, "rope theta and norm epsilon must be positive");
  }
  return {};
}

Result<ModelContents> Model::read(std::span<const std::byte> bytes, const std::string& name) {
  if (!gguf::has_magic(bytes)) return llama2c::read(bytes, name);
  auto file = gguf::parse(bytes, name);
  if (!file) return file.error();
  return read_gguf_model(*file, bytes, name);
}

Result<Model> Model::load(const std::string& path) {
  auto file = MappedFile::open(path);
  if (!file) return file.error();
  auto contents = read(file->bytes(), path);
  if (!contents) return contents.error();
  return Model(std::move(*contents), std::move(*file));
}

}  // namespace accord
