// A model's weights as the kernels read them: cpu::Matrix views into the
// file mapping or into the Model's own float buffer (model.hpp), and the
// walks over them in canonical order.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/matrix.hpp"
#include "runtime/model/model.hpp"

namespace accord {

// One block's weights; matrices are row-major (out, in).
struct LayerWeights {
  const float* rms_att = nullptr;  // (dim)
  cpu::Matrix wq;                  // (dim, dim)
  cpu::Matrix wk;                  // (kv_dim, dim)
  cpu::Matrix wv;                  // (kv_dim, dim)
  cpu::Matrix wo;                  // (dim, dim)
  const float* rms_ffn = nullptr;  // (dim)
  cpu::Matrix w1;                  // (hidden_dim, dim) gate
  cpu::Matrix w2;                  // (dim, hidden_dim) down
  cpu::Matrix w3;                  // (hidden_dim, dim) up
};

struct ModelWeights {
  cpu::Matrix token_embedding;       // (vocab_size, dim)
  std::vector<LayerWeights> layers;  // n_layers blocks
  const float* rms_final = nullptr;  // (dim)
  cpu::Matrix classifier;            // (vocab_size, dim)
};

// A piece of a weight tensor as floats: values [first, first + count) of
// its total.
struct WeightPiece {
  WeightId id;
  const float* data;
  std::size_t count;
  std::size_t first;
  std::size_t total;
};

// One weight tensor where it lies: a matrix, or a norm's floats.
struct WeightTensor {
  WeightId id;
  const cpu::Matrix* matrix = nullptr;
  const float* norm = nullptr;  // (dim), when matrix is null
};

// Every weight tensor `scope` holds, in one canonical order (embedding; per
// layer rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3; final norm; the
// classifier when it is not shared), whatever the file layout. The
// index of a tensor in the list of everything is its canonical index.
std::vector<WeightTensor> weight_tensors(const ModelConfig& config, const ModelWeights& weights,
                                         const WeightScope& scope = WeightScope::everything());

// Calls fn for every piece of `tensor`, a few whole rows at a time: where
// they lie for floats, else dequantized into `scratch`, so a quantized
// model never exists whole as floats.
void for_each_piece(const WeightTensor& tensor, int dim, std::vector<float>& scratch,
                    const std::function<void(const WeightPiece& piece)>& fn);

// Where `tensor` lies in `bytes` (a model file's), as offsets; nullopt
// when it lies elsewhere (a norm the Model owns).
std::optional<ByteRange> tensor_range(const WeightTensor& tensor, int dim, std::span<const std::byte> bytes);

// Where `tensors` lie in `bytes`, sorted by offset, touching ranges merged.
std::vector<ByteRange> tensor_ranges(const std::vector<WeightTensor>& tensors, int dim,
                                     std::span<const std::byte> bytes);

// for_each_piece over weight_tensors(config, weights), in order.
void for_each_weight(const ModelConfig& config, const ModelWeights& weights,
                     const std::function<void(const WeightPiece& piece)>& fn);

// What a format reader makes of a file's bytes: the weights point into
// those bytes or into `owned`.
struct ModelContents {
  ModelConfig config;
  ModelWeights weights;
  std::vector<float> owned;  // norm weights not stored as aligned F32; the buffer keeps its address when moved
  std::vector<StoredTensor> tensors;
  std::string format;  // e.g. "llama2c-legacy", "gguf-v3"
  WeightScope scope;   // the weights read; the others point into the file but were never touched
  // identity.hpp; the readers set them as they check every weight read is
  // finite. identity is empty unless the scope holds every weight.
  std::vector<std::string> tensor_digests;
  std::string identity;
};

}  // namespace accord
