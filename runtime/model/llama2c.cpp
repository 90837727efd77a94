#include "runtime/model/llama2c.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/cpu/ops.hpp"
#include "runtime/io/durable_file.hpp"
#include "runtime/model/identity.hpp"

namespace accord::llama2c {

namespace {

constexpr std::uint32_t kMagic = 0x616b3432;  // "ak42" little-endian
constexpr std::size_t kLegacyHeaderBytes = 7 * sizeof(std::int32_t);
constexpr std::size_t kV1HeaderBytes = 256;

struct TensorSpan {
  Tensor tensor;
  std::size_t count;  // floats, all layers together
};

// The tensors of a checkpoint in file order, with their sizes. The loader
// and the writer both walk this list, so they cannot disagree.
std::vector<TensorSpan> file_order(const ModelConfig& c, Layout layout) {
  const std::size_t L = c.n_layers, D = c.dim, H = c.hidden_dim, V = c.vocab_size, KV = c.kv_dim();
  const std::size_t rope = static_cast<std::size_t>(c.seq_len) * c.head_size() / 2;
  std::vector<TensorSpan> order;
  if (layout == Layout::legacy) {
    order = {{Tensor::token_embedding, V * D}, {Tensor::rms_att, L * D}, {Tensor::wq, L * D * D},
             {Tensor::wk, L * KV * D},         {Tensor::wv, L * KV * D}, {Tensor::wo, L * D * D},
             {Tensor::rms_ffn, L * D},         {Tensor::w1, L * H * D},  {Tensor::w2, L * D * H},
             {Tensor::w3, L * H * D},          {Tensor::rms_final, D},   {Tensor::freq_cis_real, rope},
             {Tensor::freq_cis_imag, rope}};
  } else {
    order = {{Tensor::rms_att, L * D},         {Tensor::rms_ffn, L * D}, {Tensor::rms_final, D},
             {Tensor::token_embedding, V * D}, {Tensor::wq, L * D * D},  {Tensor::wk, L * KV * D},
             {Tensor::wv, L * KV * D},         {Tensor::wo, L * D * D},  {Tensor::w1, L * H * D},
             {Tensor::w2, L * D * H},          {Tensor::w3, L * H * D}};
  }
  if (!c.shared_classifier) order.push_back({Tensor::classifier, V * D});
  return order;
}

std::size_t header_bytes(Layout layout) { return layout == Layout::legacy ? kLegacyHeaderBytes : kV1HeaderBytes; }

std::int32_t read_i32(const std::byte* p) {
  std::int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

Error format_error(const std::string& name, const std::string& what) {
  return Error(ErrorCode::format, name + ": " + what);
}

// Reads the seven shape fields that both layouts share.
ModelConfig read_shape(const std::byte* p) {
  ModelConfig c;
  c.dim = read_i32(p + 0);
  c.hidden_dim = read_i32(p + 4);
  c.n_layers = read_i32(p + 8);
  c.n_heads = read_i32(p + 12);
  c.n_kv_heads = read_i32(p + 16);
  c.vocab_size = read_i32(p + 20);
  c.seq_len = read_i32(p + 24);
  return c;
}

// How a file starts, against GGUF's magic, for an error about what it is.
std::string first_bytes(std::span<const std::byte> bytes) {
  if (bytes.empty()) return "it is empty";
  std::string text = "it starts with \"";
  for (std::size_t i = 0; i < std::min<std::size_t>(bytes.size(), 4); ++i) {
    const auto c = std::to_integer<unsigned char>(bytes[i]);
    char hex[8];
    std::snprintf(hex, sizeof hex, "\\x%02X", c);
    text += c >= 0x20 && c < 0x7F ? std::string(1, static_cast<char>(c)) : std::string(hex);
  }
  return text + "\", not \"GGUF\"";
}

// A file without either magic is read as a legacy checkpoint, whose header
// has none. When that header makes no sense the file is most likely
// something else, often a GGUF file that is not one: say what it is not.
Error not_a_model(std::span<const std::byte> bytes, const std::string& name, const std::string& problem) {
  return Error(ErrorCode::format, name + ": not a GGUF file (" + first_bytes(bytes) +
                                      ") nor a llama2.c checkpoint (read as a legacy header: " + problem + ")");
}

// Reads the legacy header, which has no magic.
Result<ModelConfig> read_legacy_header(std::span<const std::byte> bytes, const std::string& name) {
  if (bytes.size() < kLegacyHeaderBytes) {
    return not_a_model(bytes, name,
                       "truncated: " + std::to_string(bytes.size()) + " bytes is shorter than a llama2.c header");
  }
  ModelConfig c = read_shape(bytes.data());
  // A negative vocabulary size marks a separate classifier. INT32_MIN has
  // no positive counterpart and is left for validate() to refuse.
  c.shared_classifier = c.vocab_size > 0;
  if (c.vocab_size < 0 && c.vocab_size != INT32_MIN) c.vocab_size = -c.vocab_size;
  if (Status valid = validate(c); !valid) return not_a_model(bytes, name, valid.error().message());
  return c;
}

// Reads the version 1 header, after the "ak42" magic.
Result<ModelConfig> read_v1_header(std::span<const std::byte> bytes, const std::string& name) {
  if (bytes.size() < kV1HeaderBytes) return format_error(name, "truncated inside the 256-byte version header");
  const std::int32_t version = read_i32(bytes.data() + 4);
  if (version == 2) {
    return Error(ErrorCode::architecture,
                 name + ": llama2.c version 2 (int8 quantized) checkpoints are not supported; export fp32");
  }
  if (version != 1) return format_error(name, "unknown llama2.c format version " + std::to_string(version));
  ModelConfig c = read_shape(bytes.data() + 8);
  c.shared_classifier = std::to_integer<int>(bytes[36]) != 0;
  if (Status valid = validate(c); !valid) return format_error(name, valid.error().message());
  return c;
}

bool has_v1_magic(std::span<const std::byte> bytes) {
  return bytes.size() >= 4 && static_cast<std::uint32_t>(read_i32(bytes.data())) == kMagic;
}

// The layout and validated configuration of the header of `bytes`.
Result<std::pair<ModelConfig, Layout>> parse_header(std::span<const std::byte> bytes, const std::string& name) {
  const Layout layout = has_v1_magic(bytes) ? Layout::v1 : Layout::legacy;
  auto config = layout == Layout::v1 ? read_v1_header(bytes, name) : read_legacy_header(bytes, name);
  if (!config) return config.error();
  return std::pair{*config, layout};
}

// The file must be exactly as long as its header implies.
Status check_length(std::span<const std::byte> bytes, const std::string& name, const ModelConfig& config,
                    Layout layout) {
  std::size_t expected = header_bytes(layout);
  for (const auto& span : file_order(config, layout)) expected += span.count * sizeof(float);
  if (bytes.size() == expected) return {};
  return format_error(
      name, (bytes.size() < expected ? "truncated: " : "unexpected trailing data: ") + std::to_string(bytes.size()) +
                " bytes, but the header (dim " + std::to_string(config.dim) + ", " + std::to_string(config.n_layers) +
                " layers, vocab " + std::to_string(config.vocab_size) + ") implies " + std::to_string(expected));
}

std::string format_name(Layout layout) { return layout == Layout::legacy ? "llama2c-legacy" : "llama2c-v1"; }

void assign(ModelWeights& w, const ModelConfig& c, Tensor tensor, const float* p) {
  const int D = c.dim, H = c.hidden_dim, KV = c.kv_dim(), V = c.vocab_size;
  auto norms = [&](const float* LayerWeights::*field) {
    for (std::size_t l = 0; l < w.layers.size(); ++l) w.layers[l].*field = p + l * static_cast<std::size_t>(D);
  };
  // Each layer's (rows, cols) matrix follows the previous layer's.
  auto matrices = [&](cpu::Matrix LayerWeights::*field, int rows, int cols) {
    const std::size_t stride = static_cast<std::size_t>(rows) * cols;
    for (std::size_t l = 0; l < w.layers.size(); ++l)
      w.layers[l].*field = cpu::Matrix::of_floats(p + l * stride, rows, cols);
  };
  switch (tensor) {
    case Tensor::token_embedding: w.token_embedding = cpu::Matrix::of_floats(p, V, D); break;
    case Tensor::rms_att: norms(&LayerWeights::rms_att); break;
    case Tensor::wq: matrices(&LayerWeights::wq, D, D); break;
    case Tensor::wk: matrices(&LayerWeights::wk, KV, D); break;
    case Tensor::wv: matrices(&LayerWeights::wv, KV, D); break;
    case Tensor::wo: matrices(&LayerWeights::wo, D, D); break;
    case Tensor::rms_ffn: norms(&LayerWeights::rms_ffn); break;
    case Tensor::w1: matrices(&LayerWeights::w1, H, D); break;
    case Tensor::w2: matrices(&LayerWeights::w2, D, H); break;
    case Tensor::w3: matrices(&LayerWeights::w3, H, D); break;
    case Tensor::rms_final: w.rms_final = p; break;
    case Tensor::freq_cis_real:
    case Tensor::freq_cis_imag: break;  // run.c recomputes RoPE; so do we
    case Tensor::classifier: w.classifier = cpu::Matrix::of_floats(p, V, D); break;
  }
}

std::string tensor_name(Tensor tensor) {
  static const char* const names[] = {"token_embedding_table",
                                      "rms_att_weight",
                                      "wq",
                                      "wk",
                                      "wv",
                                      "wo",
                                      "rms_ffn_weight",
                                      "w1",
                                      "w2",
                                      "w3",
                                      "rms_final_weight",
                                      "freq_cis_real",
                                      "freq_cis_imag",
                                      "wcls"};
  return names[static_cast<std::size_t>(tensor)];
}

// How a checkpoint names a weight of a block: its stacked tensor and the layer.
std::string tensor_weight_name(WeightId id) {
  // The two enums agree up to rms_final; the RoPE tables sit between it and the classifier.
  static_assert(static_cast<int>(WeightKind::rms_final) == static_cast<int>(Tensor::rms_final));
  const Tensor tensor = id.kind == WeightKind::classifier ? Tensor::classifier : static_cast<Tensor>(id.kind);
  return tensor_name(tensor) + (id.layer < 0 ? "" : " (layer " + std::to_string(id.layer) + ")");
}

// Row-major shape, slowest dimension first, as run.c indexes the tensor.
std::vector<std::uint64_t> tensor_shape(Tensor tensor, const ModelConfig& c) {
  const std::uint64_t L = c.n_layers, D = c.dim, H = c.hidden_dim, V = c.vocab_size, KV = c.kv_dim();
  switch (tensor) {
    case Tensor::token_embedding:
    case Tensor::classifier: return {V, D};
    case Tensor::rms_att:
    case Tensor::rms_ffn: return {L, D};
    case Tensor::wq:
    case Tensor::wo: return {L, D, D};
    case Tensor::wk:
    case Tensor::wv: return {L, KV, D};
    case Tensor::w1:
    case Tensor::w3: return {L, H, D};
    case Tensor::w2: return {L, D, H};
    case Tensor::rms_final: return {D};
    case Tensor::freq_cis_real:
    case Tensor::freq_cis_imag:
      return {static_cast<std::uint64_t>(c.seq_len), static_cast<std::uint64_t>(c.head_size() / 2)};
  }
  return {};
}

}  // namespace

Result<ModelHeader> read_header(std::span<const std::byte> bytes, const std::string& name) {
  auto header = parse_header(bytes, name);
  if (!header) return header.error();
  return ModelHeader{header->first, format_name(header->second)};
}

Result<ModelContents> read(std::span<const std::byte> bytes, const std::string& name, const ModelLoad& load) {
  if (reinterpret_cast<std::uintptr_t>(bytes.data()) % alignof(float) != 0) {
    return Error(ErrorCode::contract, name + ": the bytes of a llama2.c checkpoint must be aligned for floats");
  }
  auto header = parse_header(bytes, name);
  if (!header) return header.error();
  const auto [config, layout] = *header;
  if (Status ok = check_length(bytes, name, config, layout); !ok) return ok.error();

  ModelContents contents;
  contents.config = config;
  contents.weights.layers.resize(static_cast<std::size_t>(config.n_layers));
  std::size_t offset = header_bytes(layout);
  for (const auto& span : file_order(config, layout)) {
    // The header's size is a multiple of 4 and mappings are page-aligned,
    // so every tensor is aligned for floats.
    assign(contents.weights, config, span.tensor, reinterpret_cast<const float*>(bytes.data() + offset));
    contents.tensors.push_back(
        {tensor_name(span.tensor), "F32", tensor_shape(span.tensor, config), offset, span.count * sizeof(float)});
    offset += span.count * sizeof(float);
  }
  if (config.shared_classifier) contents.weights.classifier = contents.weights.token_embedding;
  contents.format = format_name(layout);
  contents.config.seq_len = fitted_context(config.seq_len, load);
  if (Status ok = identify(contents, bytes, name, tensor_weight_name, load); !ok) return ok.error();
  return contents;
}

Status write(const std::string& path, const ModelConfig& config, Layout layout, const TensorWriter& fill) {
  if (Status valid = validate(config); !valid) return valid;
  return write_atomically(path, [&](std::ostream& out) {
    std::vector<std::int32_t> shape = {config.dim,        config.hidden_dim, config.n_layers, config.n_heads,
                                       config.n_kv_heads, config.vocab_size, config.seq_len};
    std::vector<char> header(header_bytes(layout), 0);
    if (layout == Layout::legacy) {
      if (!config.shared_classifier) shape[5] = -shape[5];
      std::memcpy(header.data(), shape.data(), kLegacyHeaderBytes);
    } else {
      const std::int32_t version = 1;
      std::memcpy(header.data(), &kMagic, 4);
      std::memcpy(header.data() + 4, &version, 4);
      std::memcpy(header.data() + 8, shape.data(), kLegacyHeaderBytes);
      header[36] = config.shared_classifier ? 1 : 0;
    }
    out.write(header.data(), static_cast<std::streamsize>(header.size()));

    std::vector<float> buffer;
    std::vector<float> rope_scratch(static_cast<std::size_t>(config.seq_len) * config.head_size() / 2);
    for (const auto& span : file_order(config, layout)) {
      buffer.assign(span.count, 0.0f);
      if (span.tensor == Tensor::freq_cis_real) {
        cpu::rope_tables(buffer.data(), rope_scratch.data(), config.seq_len, config.head_size(), config.rope_theta);
      } else if (span.tensor == Tensor::freq_cis_imag) {
        cpu::rope_tables(rope_scratch.data(), buffer.data(), config.seq_len, config.head_size(), config.rope_theta);
      } else {
        fill(span.tensor, buffer.data(), span.count);
      }
      out.write(reinterpret_cast<const char*>(buffer.data()), static_cast<std::streamsize>(span.count * sizeof(float)));
    }
  });
}

}  // namespace accord::llama2c
