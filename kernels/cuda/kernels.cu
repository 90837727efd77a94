// The kernels of kernels.cuh other than the matrix products (products.cu):
// the embedding, RMSNorm and the attention.
#include "kernels/cuda/kernels.cuh"

#include <algorithm>

#include "kernels/cpu/quant.hpp"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/kernel_common.cuh"

namespace accord::cuda {

namespace {

// Kernels that take a row per block: enough threads that each has a value
// or two of a row to load, so that one wait serves them.
constexpr int kThreads = 1024;
// attention: positions per chunk, threads per (row, head, chunk). Short
// chunks: a decode step's one row needs many blocks to keep the device busy.
constexpr int kChunk = 64;
constexpr int kAttentionThreads = 128;

template <cpu::WeightType Type>
__global__ void embed_kernel(float* out, const std::byte* embedding, std::size_t row_bytes, const int* tokens,
                             int cols) {
  const std::byte* row = embedding + static_cast<std::size_t>(tokens[blockIdx.x]) * row_bytes;
  float* dst = out + static_cast<std::size_t>(blockIdx.x) * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = value_at<Type>(row, c);
}

__global__ void set_kernel(int* at, int value) { *at = value; }

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

// The attention's scratch: a count a (row, head) of the chunks that are
// done, for as many rows as the cache has positions (so that batches of any
// size find theirs at zero), then each (row, head, chunk)'s part, [max, sum,
// acc (head_size)].
struct AttentionScratch {
  unsigned* done;
  float* parts;
};

// Each chunk of one (row, head), rescaled to their common maximum and
// summed, into dst: the work of the block that finishes the row's head's
// last chunk. Parts are read past the L1 cache (other blocks wrote them).
__device__ void combine_chunks(float* dst, const float* parts, int chunks, int head_size) {
  const std::size_t stride = static_cast<std::size_t>(head_size) + 2;
  float maximum = -INFINITY;
  for (int c = 0; c < chunks; ++c) maximum = fmaxf(maximum, __ldcg(parts + c * stride));
  float total = 0.0f;
  for (int c = 0; c < chunks; ++c) total += __ldcg(parts + c * stride + 1) * expf(__ldcg(parts + c * stride) - maximum);
  for (int d = threadIdx.x; d < head_size; d += blockDim.x) {
    float acc = 0.0f;
    for (int c = 0; c < chunks; ++c) {
      acc += expf(__ldcg(parts + c * stride) - maximum) * __ldcg(parts + c * stride + 2 + d);
    }
    dst[d] = acc / total;
  }
}

// Whether this block finished the last of `chunks` chunks of its (row,
// head): every thread's writes are made visible first, and the last block
// puts the count back to zero for the next launch.
__device__ bool last_chunk_done(unsigned* done, int chunks) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(done, 1u) == static_cast<unsigned>(chunks - 1);
    if (last) *done = 0;
  }
  __syncthreads();
  return last;
}

// dot(query, key) over `width` values: with vector loads where the width
// allows them (the key then starts on 16 bytes: rows of the cache and
// halves of a head are multiples of 4 floats).
__device__ float half_score(const float* query, const float* key, int width) {
  float score = 0.0f;
  if (width % 4 == 0) {
    const auto* key4 = reinterpret_cast<const float4*>(key);
#pragma unroll 8
    for (int d = 0; d < width / 4; ++d) {
      const float4 k = key4[d];
      score += query[4 * d] * k.x + query[4 * d + 1] * k.y + query[4 * d + 2] * k.z + query[4 * d + 3] * k.w;
    }
    return score;
  }
#pragma unroll 8
  for (int d = 0; d < width; ++d) score += query[d] * key[d];
  return score;
}

// One chunk of one (row, head): its positions' softmax numerators, their
// maximum and sum, and the values they weigh, unnormalized, into its part.
// For the values, groups of threads split the positions and each thread of
// a group takes dimensions of the head. The block that finishes a (row,
// head)'s last chunk combines them into out.
__global__ void attention_kernel(float* out, const float* q, const float* keys, const float* values,
                                 const int* first_pos, int n_heads, int group, int head_size, int kv_dim, int chunks,
                                 AttentionScratch scratch) {
  const int chunk = blockIdx.x, h = blockIdx.y, t = blockIdx.z;
  const int length = *first_pos + t + 1;
  const int begin = chunk * kChunk;
  if (begin >= length) return;  // the whole block: a chunk past this row's end
  const int end = min(length, begin + kChunk);
  const std::size_t head = static_cast<std::size_t>(t) * n_heads + h;
  float* part = scratch.parts + (head * chunks + chunk) * (head_size + 2);
  extern __shared__ float shared[];
  float* query = shared;              // (head_size)
  float* scores = query + head_size;  // (kChunk)
  float* reduce = scores + kChunk;    // (kWarp)
  float* partial = reduce + kWarp;    // (kAttentionThreads) or (head_size)
  const float* qh = q + head * head_size;
  for (int d = threadIdx.x; d < head_size; d += blockDim.x) query[d] = qh[d];
  __syncthreads();
  const std::size_t offset = static_cast<std::size_t>(h / group) * head_size;
  const float scale = sqrtf(static_cast<float>(head_size));
  // A position for each pair of neighbouring threads, each of the pair half
  // the head: a chunk's scores in one round of loads.
  static_assert(kAttentionThreads == 2 * kChunk);
  {
    const int p = begin + static_cast<int>(threadIdx.x) / 2, half = head_size / 2 * (threadIdx.x % 2);
    const int width = threadIdx.x % 2 == 0 ? head_size / 2 : head_size - head_size / 2;
    float score = 0.0f;
    if (p < end) score = half_score(query + half, keys + static_cast<std::size_t>(p) * kv_dim + offset + half, width);
    score += __shfl_xor_sync(0xffffffffu, score, 1);
    if (threadIdx.x % 2 == 0 && p < end) scores[p - begin] = score / scale;
  }
  __syncthreads();
  float local_max = -INFINITY;
  for (int p = begin + threadIdx.x; p < end; p += blockDim.x) local_max = fmaxf(local_max, scores[p - begin]);
  const float maximum = block_reduce<true>(local_max, reduce);
  float local_sum = 0.0f;
  for (int p = begin + threadIdx.x; p < end; p += blockDim.x) {
    const float e = expf(scores[p - begin] - maximum);
    scores[p - begin] = e;
    local_sum += e;
  }
  const float sum = block_reduce<false>(local_sum, reduce);  // its barriers publish the scores
  // Groups of head_size threads, each over every groups-th position, where
  // the head fits the block evenly; else one group, a thread per dimension.
  const bool split = head_size <= static_cast<int>(blockDim.x) && blockDim.x % head_size == 0;
  const int groups = split ? static_cast<int>(blockDim.x) / head_size : 1;
  const int g = split ? threadIdx.x / head_size : 0;
  for (int d = split ? threadIdx.x % head_size : threadIdx.x; d < head_size; d += split ? head_size : blockDim.x) {
    float acc = 0.0f;
#pragma unroll 8
    for (int p = begin + g; p < end; p += groups) {
      acc += scores[p - begin] * values[static_cast<std::size_t>(p) * kv_dim + offset + d];
    }
    partial[g * head_size + d] = acc;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < head_size; d += blockDim.x) {
    float acc = 0.0f;
    for (int i = 0; i < groups; ++i) acc += partial[i * head_size + d];
    part[2 + d] = acc;
  }
  if (threadIdx.x == 0) {
    part[0] = maximum;
    part[1] = sum;
  }
  const int row_chunks = (length + kChunk - 1) / kChunk;
  if (last_chunk_done(scratch.done + head, row_chunks)) {
    combine_chunks(out + head * head_size, scratch.parts + head * chunks * (head_size + 2), row_chunks, head_size);
  }
}

int chunks_for(int positions) { return (positions + kChunk - 1) / kChunk; }

// The counts of AttentionScratch, in floats.
std::size_t attention_count_floats(int n_heads, int seq_len) { return static_cast<std::size_t>(seq_len) * n_heads; }

// The parts of `rows` rows against seq_len positions, in floats.
std::size_t attention_part_floats(int rows, int n_heads, int head_size, int seq_len) {
  return static_cast<std::size_t>(rows) * n_heads * chunks_for(seq_len) * (static_cast<std::size_t>(head_size) + 2);
}

}  // namespace

bool supported(cpu::WeightType type) {
  return type == cpu::WeightType::f32 || type == cpu::WeightType::f16 || type == cpu::WeightType::q8_0;
}

void embed(cudaStream_t stream, float* out, const DeviceMatrix& embedding, const int* tokens, int batch) {
  const dim3 grid(static_cast<unsigned>(batch));
  const std::size_t row_bytes = embedding.row_bytes();
  const auto kernel = embedding.type == cpu::WeightType::f32   ? embed_kernel<cpu::WeightType::f32>
                      : embedding.type == cpu::WeightType::f16 ? embed_kernel<cpu::WeightType::f16>
                                                               : embed_kernel<cpu::WeightType::q8_0>;
  kernel<<<grid, kThreads, 0, stream>>>(out, embedding.data, row_bytes, tokens, embedding.cols);
  check_launch();
}

void set(cudaStream_t stream, int* at, int value) {
  set_kernel<<<1, 1, 0, stream>>>(at, value);
  check_launch();
}

void rmsnorm(cudaStream_t stream, float* out, const float* x, const float* weight, int rows, int n, float eps) {
  rmsnorm_kernel<<<rows, kThreads, 0, stream>>>(out, x, weight, n, eps);
  check_launch();
}

std::size_t attention_scratch_floats(int rows, int n_heads, int head_size, int seq_len) {
  static_assert(sizeof(unsigned) == sizeof(float));
  return attention_count_floats(n_heads, seq_len) + attention_part_floats(rows, n_heads, head_size, seq_len);
}

void attention(cudaStream_t stream, float* out, const float* q, const float* keys, const float* values, int rows,
               const int* first_pos, int seq_len, int n_heads, int n_kv_heads, int head_size, float* scratch) {
  const int chunks = chunks_for(seq_len);
  const std::size_t shared =
      (static_cast<std::size_t>(head_size) + kChunk + kWarp + std::max(kAttentionThreads, head_size)) * sizeof(float);
  const AttentionScratch parts{reinterpret_cast<unsigned*>(scratch),
                               scratch + attention_count_floats(n_heads, seq_len)};
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(n_heads), static_cast<unsigned>(rows));
  attention_kernel<<<grid, kAttentionThreads, shared, stream>>>(
      out, q, keys, values, first_pos, n_heads, n_heads / n_kv_heads, head_size, n_kv_heads * head_size, chunks, parts);
  check_launch();
}

}  // namespace accord::cuda
