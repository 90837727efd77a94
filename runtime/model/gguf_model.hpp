// Llama-architecture models in GGUF files: the configuration from the
// `llama.*` metadata, the weights from the tensors, and the reverse for
// writing (`accord convert`).
//
// Tensors of type F32 are read where they lie in the mapping when aligned
// for floats; F16, Q8_0 and Q4_0 are dequantized at load into float memory
// the Model owns (docs/gguf.md says why).
#pragma once

#include <functional>
#include <span>
#include <string>

#include "runtime/base/error.hpp"
#include "runtime/model/gguf.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/weights.hpp"

namespace accord {

// Reads the llama configuration and weights of a parsed GGUF file whose
// bytes are `bytes`; pointers of the result point into `bytes` or into its
// owned buffer. Every weight must be finite (identity.hpp). `name`
// prefixes error messages.
Result<ModelContents> read_gguf_model(const gguf::File& file, std::span<const std::byte> bytes, const std::string& name,
                                      const ModelLoad& load = {});

// The llama configuration of a parsed GGUF file and its tensors' names
// and shapes, checked as read_gguf_model() checks them, reading no tensor
// data.
Result<ModelHeader> read_gguf_header(const gguf::File& file, const std::string& name);

// The `general.*` and `llama.*` metadata that describe `config` (with
// its experts' counts when it is routed).
gguf::Metadata llama_metadata(const ModelConfig& config);

// Fills the `count` floats of weight `id` for a new file (an expert stack:
// every expert's matrix, one after another, as model.hpp lays them out).
using WeightFill = std::function<void(WeightId id, float* out, std::size_t count)>;

// Writes a llama model shaped like `config`, dense or routed, every
// tensor F32, with the weights `fill` gives: for synthetic models
// (synthetic.hpp), since a llama2.c checkpoint holds no experts.
Status write_gguf_weights(const std::string& path, const ModelConfig& config, const WeightFill& fill);

// Writes `model`'s weights as a GGUF file with `metadata` (which should
// hold the llama keys and usually a vocabulary). Matrices and the embedding
// are stored as `type`; norm weights stay F32, as llama.cpp keeps them.
// general.file_type is set to match.
Status write_gguf_model(const std::string& path, const Model& model, gguf::Metadata metadata, gguf::TensorType type);

// The same with each matrix's type chosen by its GGUF name (the mixes of
// quant_mix.hpp); general.file_type is `file_type` (a llama_ftype).
using MatrixTypes = std::function<gguf::TensorType(const std::string& tensor)>;
Status write_gguf_model(const std::string& path, const Model& model, gguf::Metadata metadata, const MatrixTypes& types,
                        int file_type);

}  // namespace accord
