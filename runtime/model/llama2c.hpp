// llama2.c checkpoints (`.bin`): reading and writing.
//
// Two layouts exist. The legacy export (version 0) is a header of seven
// int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
// a negative vocab_size means the classifier is stored separately) followed
// by fp32 tensors in run.c order, including the old RoPE tables that run.c
// skips. Version 1 starts with the magic "ak42", has a 256-byte header and
// no RoPE tables. Version 2 (int8) is refused with a clear error.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "runtime/base/error.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/weights.hpp"

namespace accord::llama2c {

enum class Layout { legacy, v1 };

// Parses and validates the header of `bytes` (a whole file) and points
// every weight into them. The file must be exactly as long as its header
// says, and every weight finite (identity.hpp). `bytes` must be aligned
// for floats (a mapping or malloc'ed memory is). `name` prefixes error
// messages. A file without the "ak42" magic is read as a legacy
// checkpoint; when that header makes no sense, the error says the file is
// neither GGUF nor llama2.c, since the callers have ruled GGUF out.
Result<ModelContents> read(std::span<const std::byte> bytes, const std::string& name, const ModelLoad& load = {});

// The configuration in the header of `bytes` (a whole file, or its start),
// validated as read() validates it. Whether the file holds the weights the
// header implies is read()'s to check.
Result<ModelHeader> read_header(std::span<const std::byte> bytes, const std::string& name);

// The tensors of a checkpoint, each stacked over all layers.
enum class Tensor {
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
  freq_cis_real,
  freq_cis_imag,
  classifier,
};

// Fills `out` with the `count` floats of `tensor` for a new file.
using TensorWriter = std::function<void(Tensor tensor, float* out, std::size_t count)>;

// Writes a checkpoint atomically enough for our use (to `path`, via a
// temporary name and rename). The RoPE tables of the legacy layout are
// written as run.c's exporter computed them; `fill` provides the rest.
Status write(const std::string& path, const ModelConfig& config, Layout layout, const TensorWriter& fill);

}  // namespace accord::llama2c
