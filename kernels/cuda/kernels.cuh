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

// out = weight * x / sqrt(mean(x^2) + eps), row by row. out may alias x.
void rmsnorm(cudaStream_t stream, float* out, const float* x, const float* weight, int rows, int n, float eps);

// x += delta, then out = rmsnorm(x), row by row.
void add_rmsnorm(cudaStream_t stream, float* x, const float* delta, float* out, const float* weight, int rows, int n,
                 float eps);

// x += delta over count values.
void add(cudaStream_t stream, float* x, const float* delta, std::size_t count);

// gate = silu(gate) * up over count values.
void silu_mul(cudaStream_t stream, float* gate, const float* up, std::size_t count);

// Rotates the pairs of every head of rows (rows, heads * head_size); row t
// sits at position first_pos + t. cos, sin: (seq_len, head_size / 2).
void rope(cudaStream_t stream, float* v, int rows, int heads, int head_size, int first_pos, const float* cos,
          const float* sin);

// Scratch (floats) the attention needs for `rows` rows against a cache of
// seq_len positions.
std::size_t attention_scratch_floats(int rows, int n_heads, int head_size, int seq_len);

// Causal grouped-query attention, as cpu::attention: row t at position
// first_pos + t attends to positions 0..first_pos + t of the cache, whose
// keys and values are (positions, kv_dim). Split over the positions in
// chunks (flash-decoding): each chunk's maximum, sum and weighted values go
// to `scratch` (attention_scratch_floats), and a second kernel combines them.
void attention(cudaStream_t stream, float* out, const float* q, const float* keys, const float* values, int rows,
               int first_pos, int n_heads, int n_kv_heads, int head_size, float* scratch);

}  // namespace accord::cuda
