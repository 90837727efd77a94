// The CUDA kernels of the Llama forward pass, as host launchers over device
// pointers on one stream. Shapes and layouts follow the CPU kernels
// (kernels/cpu/ops.hpp, matmul.hpp), so the forward pass reads the same on
// both; the order of each reduction differs, so results agree within a
// tolerance, not bit for bit.
//
// Weights are the model file's bytes, copied to the device unchanged:
// F32, F16 and Q8_0 (kernels/cpu/quant.hpp's layouts). Q4_0 is refused by
// the caller before any launch.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matrix.hpp"

namespace accord::cuda {

// A weight matrix whose bytes (the file's, row-major) lie in device memory:
// the CPU's Matrix, which only describes where the bytes are.
using DeviceMatrix = cpu::Matrix;

// Whether the kernels take this type: F32, F16, Q8_0.
bool supported(cpu::WeightType type);

// out (batch, cols) = rows tokens[t] of the embedding, as floats.
void embed(cudaStream_t stream, float* out, const DeviceMatrix& embedding, const int* tokens, int batch);

// out (batch, w.rows) = x (batch, w.cols) times w transposed.
void matmul(cudaStream_t stream, float* out, const float* x, const DeviceMatrix& w, int batch);

// out (batch, w.rows) += x (batch, w.cols) times w transposed: a residual.
void matmul_add(cudaStream_t stream, float* out, const float* x, const DeviceMatrix& w, int batch);

// Where the attention's products go: queries (batch, wq.rows); keys and
// values into the cache, (positions, kv_dim), at rows *pos, *pos + 1, ...
// Queries and keys are rotated: row t at position *pos + t, its head's
// pairs by cos and sin, (seq_len, head_size / 2). The position lies in
// device memory, so that one CUDA graph serves every decode step.
struct QkvOutputs {
  float* q;
  float* keys;
  float* values;
  const int* pos;
  int head_size;
  const float* cos;
  const float* sin;
};

// The RMSNorm a product applies to its input first (as rmsnorm), where
// `weight` is not null. A decode step's product (one row) works it out in
// the same launch; a larger batch is normalized into `scratch`, a buffer of
// the input's size, by a launch before the product's.
struct InputNorm {
  const float* weight = nullptr;
  float eps = 0.0f;
  float* scratch = nullptr;
};

// The queries, keys and values of x (batch, dim), normalized by `norm`.
void qkv(cudaStream_t stream, const QkvOutputs& out, const float* x, const InputNorm& norm, const DeviceMatrix& wq,
         const DeviceMatrix& wk, const DeviceMatrix& wv, int batch);

// out (batch, w1.rows) = silu(x' w1^T) * (x' w3^T), x' = x normalized by
// `norm`: the feed-forward's hidden layer.
void gate_up(cudaStream_t stream, float* out, const float* x, const InputNorm& norm, const DeviceMatrix& w1,
             const DeviceMatrix& w3, int batch);

// *at = value, in stream order.
void set(cudaStream_t stream, int* at, int value);

// out = weight * x / sqrt(mean(x^2) + eps), row by row. out may alias x.
void rmsnorm(cudaStream_t stream, float* out, const float* x, const float* weight, int rows, int n, float eps);

// Scratch (floats) the attention needs for `rows` rows (at most seq_len)
// against a cache of seq_len positions. It is zeroed before its first use,
// and each launch leaves its counts at zero again, whatever its rows.
std::size_t attention_scratch_floats(int rows, int n_heads, int head_size, int seq_len);

// Causal grouped-query attention, as cpu::attention: row t at position
// *first_pos + t attends to positions 0..*first_pos + t of the cache, whose
// keys and values are (seq_len, kv_dim). Split over the positions in
// chunks (flash-decoding): each chunk's maximum, sum and weighted values go
// to `scratch` (attention_scratch_floats), and the block that finishes a
// (row, head)'s last chunk combines them, in the same launch. The launch
// covers the whole cache, chunks past the rows' ends returning at once, so
// that it does not depend on the position, which lies in device memory
// (QkvOutputs).
void attention(cudaStream_t stream, float* out, const float* q, const float* keys, const float* values, int rows,
               const int* first_pos, int seq_len, int n_heads, int n_kv_heads, int head_size, float* scratch);

}  // namespace accord::cuda
