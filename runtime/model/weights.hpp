// A model's weights as the kernels read them: cpu::Matrix views into the
// file mapping or into the Model's own float buffer (model.hpp), and the
// walks over them in canonical order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/matrix.hpp"
#include "runtime/model/model.hpp"

namespace accord {

// One block's weights; matrices are row-major (out, in). The vectors an
// architecture does not have stay null.
struct LayerWeights {
  const float* rms_att = nullptr;        // (dim)
  cpu::Matrix wq;                        // (q_dim, dim)
  cpu::Matrix wk;                        // (kv_dim, dim)
  cpu::Matrix wv;                        // (kv_dim, dim)
  const float* bq = nullptr;             // (q_dim)
  const float* bk = nullptr;             // (kv_dim)
  const float* bv = nullptr;             // (kv_dim)
  const float* q_norm = nullptr;         // (head_size)
  const float* k_norm = nullptr;         // (head_size)
  cpu::Matrix wo;                        // (dim, q_dim)
  const float* post_att_norm = nullptr;  // (dim)
  const float* rms_ffn = nullptr;        // (dim)
  cpu::Matrix router;                    // (n_experts, dim), when routed
  cpu::Matrix w1;                        // (hidden_dim, dim) gate; routed: (n_experts * hidden_dim, dim)
  cpu::Matrix w2;                        // (dim, hidden_dim) down; routed: (n_experts * dim, hidden_dim)
  cpu::Matrix w3;                        // (hidden_dim, dim) up; routed: (n_experts * hidden_dim, dim)
  const float* post_ffn_norm = nullptr;  // (dim)
};

struct ModelWeights {
  cpu::Matrix token_embedding;          // (vocab_size, dim)
  const float* rope_factors = nullptr;  // (head_size / 2), when the file has them
  std::vector<LayerWeights> layers;     // n_layers blocks
  const float* rms_final = nullptr;     // (dim)
  cpu::Matrix classifier;               // (vocab_size, dim)
};

// Where weight `id` sits in `weights`: a matrix, or a vector's pointer.
struct WeightSlot {
  cpu::Matrix* matrix = nullptr;
  const float** vector = nullptr;
};
WeightSlot weight_slot(ModelWeights& weights, WeightId id);

// A piece of a weight tensor as floats: values [first, first + count) of
// its total.
struct WeightPiece {
  WeightId id;
  const float* data;
  std::size_t count;
  std::size_t first;
  std::size_t total;
};

// One weight tensor where it lies: a matrix, or a vector's floats.
struct WeightTensor {
  WeightId id;
  const cpu::Matrix* matrix = nullptr;
  const float* vector = nullptr;  // (length), when matrix is null
  std::size_t length = 0;
  // Of a matrix, the rows held: all of them, or of a routed block's expert
  // stack the rows of the experts a scope holds (one range: a rank holds
  // consecutive experts).
  int first_row = 0;
  int rows = 0;

  // The bytes held: the rows' of a matrix, a vector's floats.
  std::uint64_t bytes() const {
    return matrix != nullptr ? static_cast<std::uint64_t>(rows) * matrix->row_bytes() : length * sizeof(float);
  }
};

// Every weight tensor `scope` holds, in the canonical order
// (canonical_weights), whatever the file layout, each with the rows the
// scope holds of it. The index of a tensor in the list of everything is
// its canonical index.
std::vector<WeightTensor> weight_tensors(const ModelConfig& config, const ModelWeights& weights,
                                         const WeightScope& scope = WeightScope::everything());

// Calls fn for every piece of `tensor`'s held rows, a few whole rows at a
// time: where they lie for floats, else dequantized into `scratch`, so a
// quantized model never exists whole as floats. A piece's `first` and
// `total` count the whole tensor's values.
void for_each_piece(const WeightTensor& tensor, std::vector<float>& scratch,
                    const std::function<void(const WeightPiece& piece)>& fn);

// Where `tensor`'s held rows lie in `bytes` (a model file's), as offsets;
// nullopt when it lies elsewhere (a vector the Model owns).
std::optional<ByteRange> tensor_range(const WeightTensor& tensor, std::span<const std::byte> bytes);

// Where `tensors` lie in `bytes`, sorted by offset, touching ranges merged.
std::vector<ByteRange> tensor_ranges(const std::vector<WeightTensor>& tensors, std::span<const std::byte> bytes);

// for_each_piece over weight_tensors(config, weights), in order.
void for_each_weight(const ModelConfig& config, const ModelWeights& weights,
                     const std::function<void(const WeightPiece& piece)>& fn);

// What a format reader makes of a file's bytes: the weights point into
// those bytes or into `owned`.
struct ModelContents {
  ModelConfig config;
  ModelWeights weights;
  std::vector<float> owned;  // vectors not stored as aligned F32; the buffer keeps its address when moved
  std::vector<StoredTensor> tensors;
  std::string format;  // e.g. "llama2c-legacy", "gguf-v3"
  WeightScope scope;   // the weights read; the others point into the file but were never touched
  // identity.hpp; the readers set them as they check every weight read is
  // finite. identity is empty unless the scope holds every weight.
  std::vector<std::string> tensor_digests;
  std::string identity;
};

}  // namespace accord
