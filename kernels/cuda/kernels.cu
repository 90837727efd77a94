#include "kernels/cuda/kernels.cuh"

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/quant.hpp"
#include "kernels/cuda/check.cuh"

namespace accord::cuda {

namespace {

constexpr int kWarp = 32;
// matmul: one warp per output row, and each pass over a row serves this
// many tokens of the batch (a decode step's one token reads the row once).
constexpr int kRowsPerBlock = 8;
constexpr int kTokensPerPass = 4;
// Kernels that take a row per block, and the elementwise ones.
constexpr int kThreads = 256;
// attention: positions per chunk, threads per (row, head, chunk).
constexpr int kChunk = 256;
constexpr int kAttentionThreads = 128;

__device__ float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// The sum (or maximum) over the block, in every thread. `shared`: kWarp
// floats; the first barrier lets a previous call's readers finish.
template <bool Maximum>
__device__ float block_reduce(float v, float* shared) {
  const float identity = Maximum ? -INFINITY : 0.0f;
  v = Maximum ? warp_max(v) : warp_sum(v);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + kWarp - 1) / kWarp;
  v = lane < warps ? shared[lane] : identity;
  return Maximum ? warp_max(v) : warp_sum(v);
}

__device__ float half_at(const std::byte* p) { return __half2float(*reinterpret_cast<const __half*>(p)); }

// Value c of a row of the given type.
template <cpu::WeightType Type>
__device__ float value_at(const std::byte* row, int c) {
  if constexpr (Type == cpu::WeightType::f32) {
    return reinterpret_cast<const float*>(row)[c];
  } else if constexpr (Type == cpu::WeightType::f16) {
    return half_at(row + 2 * static_cast<std::size_t>(c));
  } else {
    const std::byte* block = row + static_cast<std::size_t>(c / 32) * cpu::kQ8_0BlockBytes;
    return half_at(block) * static_cast<float>(reinterpret_cast<const signed char*>(block + 2)[c % 32]);
  }
}

// acc[t] += this lane's share of dot(row, x[t]) for t < tokens, a value at
// a time: F32 and F16 rows whose width the vector loads do not divide.
template <cpu::WeightType Type>
__device__ void scalar_row_dots(const std::byte* row, const float* x, int cols, int tokens,
                                float (&acc)[kTokensPerPass]) {
  for (int c = threadIdx.x % kWarp; c < cols; c += kWarp) {
    const float w = value_at<Type>(row, c);
    for (int t = 0; t < kTokensPerPass; ++t) {
      if (t >= tokens) break;
      acc[t] += w * x[static_cast<std::size_t>(t) * cols + c];
    }
  }
}

// The same with vector loads: 4 floats, 8 halves or a Q8_0 block at a time.
template <cpu::WeightType Type>
__device__ void row_dots(const std::byte* row, const float* x, int cols, int tokens, float (&acc)[kTokensPerPass]) {
  const int lane = threadIdx.x % kWarp;
  if constexpr (Type == cpu::WeightType::f32) {
    if (cols % 4 != 0) return scalar_row_dots<Type>(row, x, cols, tokens, acc);
    const auto* w4 = reinterpret_cast<const float4*>(row);
    for (int c = lane; c < cols / 4; c += kWarp) {
      const float4 w = w4[c];
      for (int t = 0; t < kTokensPerPass; ++t) {
        if (t >= tokens) break;
        const float4 v = reinterpret_cast<const float4*>(x + static_cast<std::size_t>(t) * cols)[c];
        acc[t] += w.x * v.x + w.y * v.y + w.z * v.z + w.w * v.w;
      }
    }
  } else if constexpr (Type == cpu::WeightType::f16) {
    if (cols % 8 != 0) return scalar_row_dots<Type>(row, x, cols, tokens, acc);
    const auto* w8 = reinterpret_cast<const uint4*>(row);
    for (int c = lane; c < cols / 8; c += kWarp) {
      const uint4 raw = w8[c];
      const auto* h = reinterpret_cast<const __half2*>(&raw);
      float w[8];
      for (int i = 0; i < 4; ++i) {
        const float2 pair = __half22float2(h[i]);
        w[2 * i] = pair.x;
        w[2 * i + 1] = pair.y;
      }
      for (int t = 0; t < kTokensPerPass; ++t) {
        if (t >= tokens) break;
        const auto* v4 = reinterpret_cast<const float4*>(x + static_cast<std::size_t>(t) * cols) + 2 * c;
        const float4 a = v4[0], b = v4[1];
        acc[t] += w[0] * a.x + w[1] * a.y + w[2] * a.z + w[3] * a.w + w[4] * b.x + w[5] * b.y + w[6] * b.z +
                  w[7] * b.w;
      }
    }
  } else {
    // A lane per block of 32: its scale, then its quants two at a time.
    for (int b = lane; b < cols / 32; b += kWarp) {
      const std::byte* block = row + static_cast<std::size_t>(b) * cpu::kQ8_0BlockBytes;
      const float scale = half_at(block);
      const auto* pairs = reinterpret_cast<const unsigned short*>(block + 2);
      for (int t = 0; t < kTokensPerPass; ++t) {
        if (t >= tokens) break;
        const float* v = x + static_cast<std::size_t>(t) * cols + static_cast<std::size_t>(b) * 32;
        float sum = 0.0f;
        for (int i = 0; i < 16; ++i) {
          const unsigned short two = pairs[i];
          sum += static_cast<float>(static_cast<signed char>(two & 0xff)) * v[2 * i] +
                 static_cast<float>(static_cast<signed char>(two >> 8)) * v[2 * i + 1];
        }
        acc[t] += scale * sum;
      }
    }
  }
}

template <cpu::WeightType Type>
__global__ void matmul_kernel(float* out, const float* x, const std::byte* w, int rows, int cols, int batch,
                              std::size_t row_bytes) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;  // the whole warp: nothing below waits for the block
  const std::byte* weights = w + static_cast<std::size_t>(row) * row_bytes;
  for (int first = 0; first < batch; first += kTokensPerPass) {
    const int tokens = min(kTokensPerPass, batch - first);
    float acc[kTokensPerPass] = {};
    row_dots<Type>(weights, x + static_cast<std::size_t>(first) * cols, cols, tokens, acc);
    for (int t = 0; t < kTokensPerPass; ++t) {
      const float sum = warp_sum(acc[t]);
      if (threadIdx.x % kWarp == 0 && t < tokens) out[static_cast<std::size_t>(first + t) * rows + row] = sum;
    }
  }
}

template <cpu::WeightType Type>
__global__ void embed_kernel(float* out, const std::byte* embedding, std::size_t row_bytes, const int* tokens,
                             int cols) {
  const std::byte* row = embedding + static_cast<std::size_t>(tokens[blockIdx.x]) * row_bytes;
  float* dst = out + static_cast<std::size_t>(blockIdx.x) * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = value_at<Type>(row, c);
}

__global__ void rmsnorm_kernel(float* out, const float* x, const float* weight, int n, float eps) {
  __shared__ float shared[kWarp];
  const float* in = x + static_cast<std::size_t>(blockIdx.x) * n;
  float* dst = out + static_cast<std::size_t>(blockIdx.x) * n;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += in[i] * in[i];
  ss = block_reduce<false>(ss, shared);
  const float inverse = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
  // Each thread rewrites only what it read: out may alias x.
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = weight[i] * (inverse * in[i]);
}

__global__ void add_rmsnorm_kernel(float* x, const float* delta, float* out, const float* weight, int n, float eps) {
  __shared__ float shared[kWarp];
  float* row = x + static_cast<std::size_t>(blockIdx.x) * n;
  const float* add = delta + static_cast<std::size_t>(blockIdx.x) * n;
  float* dst = out + static_cast<std::size_t>(blockIdx.x) * n;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = row[i] + add[i];
    row[i] = v;
    ss += v * v;
  }
  ss = block_reduce<false>(ss, shared);
  const float inverse = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = weight[i] * (inverse * row[i]);
}

__global__ void add_kernel(float* x, const float* delta, std::size_t count) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    x[i] += delta[i];
  }
}

__global__ void silu_mul_kernel(float* gate, const float* up, std::size_t count) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    gate[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void rope_kernel(float* v, int heads, int head_size, int first_pos, const float* cos, const float* sin) {
  const int half = head_size / 2;
  float* row = v + static_cast<std::size_t>(blockIdx.x) * heads * head_size;
  const std::size_t angle = static_cast<std::size_t>(first_pos + static_cast<int>(blockIdx.x)) * half;
  for (int p = threadIdx.x; p < heads * half; p += blockDim.x) {
    const int j = p % half;
    float* pair = row + static_cast<std::size_t>(p / half) * head_size + 2 * j;
    const float v0 = pair[0], v1 = pair[1];
    pair[0] = v0 * cos[angle + j] - v1 * sin[angle + j];
    pair[1] = v0 * sin[angle + j] + v1 * cos[angle + j];
  }
}

// One chunk of one (row, head): its positions' softmax numerators, their
// maximum and sum, and the values they weigh, unnormalized, into `part`:
// [max, sum, acc (head_size)].
__global__ void attention_chunk_kernel(const float* q, const float* keys, const float* values, int first_pos,
                                       int n_heads, int group, int head_size, int kv_dim, int chunks,
                                       float* scratch) {
  const int chunk = blockIdx.x, h = blockIdx.y, t = blockIdx.z;
  const int length = first_pos + t + 1;
  const int begin = chunk * kChunk;
  float* part = scratch + ((static_cast<std::size_t>(t) * n_heads + h) * chunks + chunk) * (head_size + 2);
  if (begin >= length) {  // the whole block: a later row's chunk past this row's end
    if (threadIdx.x == 0) {
      part[0] = -INFINITY;
      part[1] = 0.0f;
    }
    return;
  }
  const int end = min(length, begin + kChunk);
  extern __shared__ float shared[];
  float* query = shared;                 // (head_size)
  float* scores = query + head_size;     // (kChunk)
  float* reduce = scores + kChunk;       // (kWarp)
  const float* qh = q + (static_cast<std::size_t>(t) * n_heads + h) * head_size;
  for (int d = threadIdx.x; d < head_size; d += blockDim.x) query[d] = qh[d];
  __syncthreads();
  const std::size_t offset = static_cast<std::size_t>(h / group) * head_size;
  const float scale = sqrtf(static_cast<float>(head_size));
  float local_max = -INFINITY;
  for (int p = begin + threadIdx.x; p < end; p += blockDim.x) {
    const float* key = keys + static_cast<std::size_t>(p) * kv_dim + offset;
    float score = 0.0f;
    for (int d = 0; d < head_size; ++d) score += query[d] * key[d];
    score /= scale;
    scores[p - begin] = score;
    local_max = fmaxf(local_max, score);
  }
  const float maximum = block_reduce<true>(local_max, reduce);
  float local_sum = 0.0f;
  for (int p = begin + threadIdx.x; p < end; p += blockDim.x) {
    const float e = expf(scores[p - begin] - maximum);
    scores[p - begin] = e;
    local_sum += e;
  }
  const float sum = block_reduce<false>(local_sum, reduce);  // its barriers publish the scores
  for (int d = threadIdx.x; d < head_size; d += blockDim.x) {
    float acc = 0.0f;
    for (int p = begin; p < end; ++p) acc += scores[p - begin] * values[static_cast<std::size_t>(p) * kv_dim + offset + d];
    part[2 + d] = acc;
  }
  if (threadIdx.x == 0) {
    part[0] = maximum;
    part[1] = sum;
  }
}

// Each (row, head)'s chunks rescaled to their common maximum and summed.
__global__ void attention_combine_kernel(float* out, const float* scratch, int n_heads, int head_size, int chunks) {
  const int h = blockIdx.x, t = blockIdx.y;
  const std::size_t stride = static_cast<std::size_t>(head_size) + 2;
  const float* parts = scratch + (static_cast<std::size_t>(t) * n_heads + h) * chunks * stride;
  float maximum = -INFINITY;
  for (int c = 0; c < chunks; ++c) maximum = fmaxf(maximum, parts[c * stride]);
  float total = 0.0f;
  for (int c = 0; c < chunks; ++c) {
    if (parts[c * stride + 1] > 0.0f) total += parts[c * stride + 1] * expf(parts[c * stride] - maximum);
  }
  float* dst = out + (static_cast<std::size_t>(t) * n_heads + h) * head_size;
  for (int d = threadIdx.x; d < head_size; d += blockDim.x) {
    float acc = 0.0f;
    for (int c = 0; c < chunks; ++c) {
      // A chunk past the row's end holds no sums: its acc was never written.
      if (parts[c * stride + 1] > 0.0f) acc += expf(parts[c * stride] - maximum) * parts[c * stride + 2 + d];
    }
    dst[d] = acc / total;
  }
}

unsigned blocks_for(std::size_t count) {
  return static_cast<unsigned>(std::min<std::size_t>((count + kThreads - 1) / kThreads, 4096));
}

int chunks_for(int positions) { return (positions + kChunk - 1) / kChunk; }

void check_launch() { ACCORD_CUDA_CHECK(cudaGetLastError()); }

}  // namespace

bool supported(cpu::WeightType type) {
  return type == cpu::WeightType::f32 || type == cpu::WeightType::f16 || type == cpu::WeightType::q8_0;
}

void embed(cudaStream_t stream, float* out, const DeviceMatrix& embedding, const int* tokens, int batch) {
  const std::size_t row_bytes = embedding.row_bytes();
  switch (embedding.type) {
    case cpu::WeightType::f32:
      embed_kernel<cpu::WeightType::f32><<<batch, kThreads, 0, stream>>>(out, embedding.data, row_bytes, tokens,
                                                                       embedding.cols);
      break;
    case cpu::WeightType::f16:
      embed_kernel<cpu::WeightType::f16><<<batch, kThreads, 0, stream>>>(out, embedding.data, row_bytes, tokens,
                                                                       embedding.cols);
      break;
    default:
      embed_kernel<cpu::WeightType::q8_0><<<batch, kThreads, 0, stream>>>(out, embedding.data, row_bytes, tokens,
                                                                        embedding.cols);
  }
  check_launch();
}

void matmul(cudaStream_t stream, float* out, const float* x, const DeviceMatrix& w, int batch) {
  const std::size_t row_bytes = w.row_bytes();
  const unsigned blocks = static_cast<unsigned>((w.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  const unsigned threads = kRowsPerBlock * kWarp;
  switch (w.type) {
    case cpu::WeightType::f32:
      matmul_kernel<cpu::WeightType::f32><<<blocks, threads, 0, stream>>>(out, x, w.data, w.rows, w.cols, batch,
                                                                        row_bytes);
      break;
    case cpu::WeightType::f16:
      matmul_kernel<cpu::WeightType::f16><<<blocks, threads, 0, stream>>>(out, x, w.data, w.rows, w.cols, batch,
                                                                        row_bytes);
      break;
    default:
      matmul_kernel<cpu::WeightType::q8_0><<<blocks, threads, 0, stream>>>(out, x, w.data, w.rows, w.cols, batch,
                                                                         row_bytes);
  }
  check_launch();
}

void rmsnorm(cudaStream_t stream, float* out, const float* x, const float* weight, int rows, int n, float eps) {
  rmsnorm_kernel<<<rows, kThreads, 0, stream>>>(out, x, weight, n, eps);
  check_launch();
}

void add_rmsnorm(cudaStream_t stream, float* x, const float* delta, float* out, const float* weight, int rows, int n,
                 float eps) {
  add_rmsnorm_kernel<<<rows, kThreads, 0, stream>>>(x, delta, out, weight, n, eps);
  check_launch();
}

void add(cudaStream_t stream, float* x, const float* delta, std::size_t count) {
  add_kernel<<<blocks_for(count), kThreads, 0, stream>>>(x, delta, count);
  check_launch();
}

void silu_mul(cudaStream_t stream, float* gate, const float* up, std::size_t count) {
  silu_mul_kernel<<<blocks_for(count), kThreads, 0, stream>>>(gate, up, count);
  check_launch();
}

void rope(cudaStream_t stream, float* v, int rows, int heads, int head_size, int first_pos, const float* cos,
          const float* sin) {
  rope_kernel<<<rows, kThreads, 0, stream>>>(v, heads, head_size, first_pos, cos, sin);
  check_launch();
}

std::size_t attention_scratch_floats(int rows, int n_heads, int head_size, int seq_len) {
  return static_cast<std::size_t>(rows) * n_heads * chunks_for(seq_len) * (static_cast<std::size_t>(head_size) + 2);
}

void attention(cudaStream_t stream, float* out, const float* q, const float* keys, const float* values, int rows,
               int first_pos, int n_heads, int n_kv_heads, int head_size, float* scratch) {
  const int chunks = chunks_for(first_pos + rows);
  const std::size_t shared = (static_cast<std::size_t>(head_size) + kChunk + kWarp) * sizeof(float);
  attention_chunk_kernel<<<dim3(chunks, n_heads, rows), kAttentionThreads, shared, stream>>>(
      q, keys, values, first_pos, n_heads, n_heads / n_kv_heads, head_size, n_kv_heads * head_size, chunks, scratch);
  check_launch();
  attention_combine_kernel<<<dim3(n_heads, rows), kAttentionThreads, 0, stream>>>(out, scratch, n_heads, head_size,
                                                                                  chunks);
  check_launch();
}

}  // namespace accord::cuda
