// The matrix products of kernels.cuh: matmul, matmul_add, qkv and gate_up,
// with the decode step's kernels for a batch of one row.
#include "kernels/cuda/kernels.cuh"

#include <cuda_fp16.h>

#include <algorithm>
#include <utility>

#include "kernels/cpu/quant.hpp"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/kernel_common.cuh"

namespace accord::cuda {

namespace {

// Products: a warp per part of an output (see Parts), and each pass over a
// row serves this many tokens of the batch (a decode step's one token reads
// the row once).
constexpr int kWarpsPerBlock = 8;
constexpr int kTokensPerPass = 4;
constexpr int kLoadsInFlight = 8;
// Blocks of a product resident on a multiprocessor at once: the registers
// the compiler may take are capped so that three fit.
constexpr int kProductBlocksPerSm = 3;

// acc[t] += this lane's share of dot(row, x[t]) for t < tokens, over
// `cols` values; token t's values start at x + t * stride. A value at a
// time: rows whose width the vector loads do not divide.
template <cpu::WeightType Type>
__device__ void scalar_row_dots(const std::byte* row, const float* x, int cols, int stride, int tokens,
                                float (&acc)[kTokensPerPass]) {
  for (int c = threadIdx.x % kWarp; c < cols; c += kWarp) {
    const float w = value_at<Type>(row, c);
    for (int t = 0; t < kTokensPerPass; ++t) {
      if (t >= tokens) break;
      acc[t] += w * x[static_cast<std::size_t>(t) * stride + c];
    }
  }
}

// A vector load of F32 or F16 weights: 4 floats or 8 halves, as floats.
template <cpu::WeightType Type>
struct VectorLoad;

template <>
struct VectorLoad<cpu::WeightType::f32> {
  using Raw = float4;
  static constexpr int kValues = 4;
  __device__ static void to_floats(const Raw& raw, float (&w)[kValues]) {
    w[0] = raw.x;
    w[1] = raw.y;
    w[2] = raw.z;
    w[3] = raw.w;
  }
};

template <>
struct VectorLoad<cpu::WeightType::f16> {
  using Raw = uint4;
  static constexpr int kValues = 8;
  __device__ static void to_floats(const Raw& raw, float (&w)[kValues]) {
    const auto* h = reinterpret_cast<const __half2*>(&raw);
    for (int i = 0; i < 4; ++i) {
      const float2 pair = __half22float2(h[i]);
      w[2 * i] = pair.x;
      w[2 * i + 1] = pair.y;
    }
  }
};

// The same with vector loads. A decode step's product waits on memory, not
// on arithmetic: each lane issues kLoadsInFlight loads before it uses the
// first, so one wait serves them all.
template <cpu::WeightType Type>
__device__ void vector_row_dots(const std::byte* row, const float* x, int cols, int stride, int tokens,
                                float (&acc)[kTokensPerPass]) {
  using Load = VectorLoad<Type>;
  using Raw = typename Load::Raw;
  const int lane = threadIdx.x % kWarp;
  const int vectors = cols / Load::kValues;
  const auto* raw_row = reinterpret_cast<const Raw*>(row);
  for (int base = lane; base < vectors; base += kWarp * kLoadsInFlight) {
    Raw raw[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int c = base + u * kWarp;
      raw[u] = c < vectors ? __ldg(raw_row + c) : Raw{};
    }
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int c = base + u * kWarp;
      if (c >= vectors) break;
      float w[Load::kValues];
      Load::to_floats(raw[u], w);
      for (int t = 0; t < kTokensPerPass; ++t) {
        if (t >= tokens) break;
        const auto* x4 = reinterpret_cast<const float4*>(x + static_cast<std::size_t>(t) * stride) +
                         static_cast<std::size_t>(c) * (Load::kValues / 4);
#pragma unroll
        for (int j = 0; j < Load::kValues / 4; ++j) {
          const float4 v = x4[j];
          acc[t] += w[4 * j] * v.x + w[4 * j + 1] * v.y + w[4 * j + 2] * v.z + w[4 * j + 3] * v.w;
        }
      }
    }
  }
}

// Q8_0: a lane per block of 32, its scale, then its quants two at a time.
__device__ void q8_0_row_dots(const std::byte* row, const float* x, int cols, int stride, int tokens,
                              float (&acc)[kTokensPerPass]) {
  for (int b = threadIdx.x % kWarp; b < cols / 32; b += kWarp) {
    const std::byte* block = row + static_cast<std::size_t>(b) * cpu::kQ8_0BlockBytes;
    const float scale = half_at(block);
    const auto* pairs = reinterpret_cast<const unsigned short*>(block + 2);
    for (int t = 0; t < kTokensPerPass; ++t) {
      if (t >= tokens) break;
      const float* v = x + static_cast<std::size_t>(t) * stride + static_cast<std::size_t>(b) * 32;
      float sum = 0.0f;
      for (int k = 0; k < 16; ++k) {
        const unsigned short two = pairs[k];
        sum += static_cast<float>(static_cast<signed char>(two & 0xff)) * v[2 * k] +
               static_cast<float>(static_cast<signed char>(two >> 8)) * v[2 * k + 1];
      }
      acc[t] += scale * sum;
    }
  }
}

// A slice of a row: its columns [first_col, first_col + cols).
struct RowPart {
  const std::byte* bytes;
  int first_col, cols;
};

// Columns [first_col, first_col + cols) of row `row` of w: first_col is a
// multiple of the vector loads' and Q8_0 blocks' widths (part_cols).
__device__ RowPart row_part(const DeviceMatrix& w, int row, int first_col, int cols) {
  return {w.row(row) + cpu::row_bytes(w.type, static_cast<std::size_t>(first_col)), first_col, cols};
}

// F32 or F16: with vector loads where their width divides the part's.
template <cpu::WeightType Type>
__device__ void float_row_dots(const RowPart& part, const float* x, int stride, int tokens,
                               float (&acc)[kTokensPerPass]) {
  if (part.cols % VectorLoad<Type>::kValues == 0) {
    vector_row_dots<Type>(part.bytes, x, part.cols, stride, tokens, acc);
  } else {
    scalar_row_dots<Type>(part.bytes, x, part.cols, stride, tokens, acc);
  }
}

// sums[t] = dot(part, x[t]) for t < tokens, in every lane of the warp; token
// t's values start at x + t * stride (the whole row's x, not the part's).
// The type is the same for the whole warp, so the switch costs no
// divergence.
__device__ void warp_dots(cpu::WeightType type, const RowPart& part, const float* x, int stride, int tokens,
                          float (&sums)[kTokensPerPass]) {
  for (int t = 0; t < kTokensPerPass; ++t) sums[t] = 0.0f;
  const float* xs = x + part.first_col;
  switch (type) {
    case cpu::WeightType::f32: float_row_dots<cpu::WeightType::f32>(part, xs, stride, tokens, sums); break;
    case cpu::WeightType::f16: float_row_dots<cpu::WeightType::f16>(part, xs, stride, tokens, sums); break;
    default: q8_0_row_dots(part.bytes, xs, part.cols, stride, tokens, sums);
  }
  for (int t = 0; t < kTokensPerPass; ++t) sums[t] = warp_sum(sums[t]);
}

// matmul_kernel and qkv_kernel give each warp of a block one part of the
// block's outputs: a slice of a long row's columns (matmul: a decode step
// has too few rows for a warp per row to keep the memory busy when each
// takes several rounds of loads), or one row of a pair that a rotation joins
// (qkv). The block adds or joins the parts in a fixed order, so results do
// not vary from run to run. Each pass serves kTokensPerPass tokens.
struct Parts {
  float sums[kWarpsPerBlock][kTokensPerPass];
};

__device__ int warp_in_block() { return static_cast<int>(threadIdx.x) / kWarp; }

// Every warp's part of the pass: sums into parts, then a barrier.
__device__ void block_pass(cpu::WeightType type, const RowPart& part, bool valid, const float* x, int stride,
                           int tokens, Parts& parts) {
  float sums[kTokensPerPass] = {};
  if (valid) warp_dots(type, part, x, stride, tokens, sums);
  if (threadIdx.x % kWarp == 0) {
    for (int t = 0; t < kTokensPerPass; ++t) parts.sums[warp_in_block()][t] = sums[t];
  }
  __syncthreads();
}

// out (batch, w.rows) = x w^T, or += when Accumulate (a residual). Each row
// in `splits` parts of its columns, kWarpsPerBlock / splits rows a block.
template <bool Accumulate>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp, kProductBlocksPerSm)
    matmul_kernel(float* out, const float* x, DeviceMatrix w, int batch, int splits) {
  __shared__ Parts parts;
  const int warp = warp_in_block();
  const int row = static_cast<int>(blockIdx.x) * (kWarpsPerBlock / splits) + warp / splits;
  const int part_cols = w.cols / splits;
  const bool valid = row < w.rows;
  const RowPart part = row_part(w, valid ? row : 0, warp % splits * part_cols, part_cols);
  for (int first = 0; first < batch; first += kTokensPerPass) {
    const int tokens = min(kTokensPerPass, batch - first);
    block_pass(w.type, part, valid, x + static_cast<std::size_t>(first) * w.cols, w.cols, tokens, parts);
    if (valid && warp % splits == 0 && threadIdx.x % kWarp == 0) {
      for (int t = 0; t < tokens; ++t) {
        float sum = 0.0f;
        for (int i = 0; i < splits; ++i) sum += parts.sums[warp + i][t];
        float& o = out[static_cast<std::size_t>(first + t) * w.rows + row];
        o = Accumulate ? o + sum : sum;
      }
    }
    __syncthreads();  // the parts are read before the next pass writes them
  }
}

// Row `row` of the queries, keys and values stacked: its matrix, its row
// there, where its outputs go (the cache's rows start at *pos), and whether
// it is rotated.
struct QkvRow {
  DeviceMatrix w;
  int row;
  float* out;
  bool rotate;
};

__device__ QkvRow qkv_row(const QkvOutputs& o, const DeviceMatrix& wq, const DeviceMatrix& wk, const DeviceMatrix& wv,
                          int row) {
  if (row < wq.rows) return {wq, row, o.q, true};
  row -= wq.rows;
  if (row < wk.rows) return {wk, row, o.keys + static_cast<std::size_t>(wk.rows) * *o.pos, true};
  row -= wk.rows;
  return {wv, row, o.values + static_cast<std::size_t>(wv.rows) * *o.pos, false};
}

// Rows come in pairs (the segments' sizes are even): an even row and the
// next, token t of the batch, rotated together where they are queries or
// keys.
__device__ void store_qkv_pair(const QkvOutputs& o, const QkvRow& even, int t, float v0, float v1) {
  if (even.rotate) {
    const int half = o.head_size / 2, j = even.row % o.head_size / 2;
    const std::size_t angle = static_cast<std::size_t>(*o.pos + t) * half + j;
    const float c = o.cos[angle], s = o.sin[angle];
    const float r0 = v0 * c - v1 * s, r1 = v0 * s + v1 * c;
    v0 = r0;
    v1 = r1;
  }
  float* dst = even.out + static_cast<std::size_t>(t) * even.w.rows + even.row;
  dst[0] = v0;
  dst[1] = v1;
}

// A warp per row of wq, then wk, then wv; the queries and keys rotated, a
// pair of neighbouring rows (neighbouring warps) a rotation; keys and values
// straight into the cache at their positions.
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp, kProductBlocksPerSm)
    qkv_kernel(QkvOutputs o, const float* x, DeviceMatrix wq, DeviceMatrix wk, DeviceMatrix wv, int batch) {
  __shared__ Parts parts;
  const int warp = warp_in_block();
  const int row = static_cast<int>(blockIdx.x) * kWarpsPerBlock + warp;
  const bool valid = row < wq.rows + wk.rows + wv.rows;
  const QkvRow target = qkv_row(o, wq, wk, wv, valid ? row : 0);
  const RowPart part = row_part(target.w, target.row, 0, target.w.cols);
  for (int first = 0; first < batch; first += kTokensPerPass) {
    const int tokens = min(kTokensPerPass, batch - first);
    block_pass(target.w.type, part, valid, x + static_cast<std::size_t>(first) * target.w.cols, target.w.cols, tokens,
               parts);
    if (valid && warp % 2 == 0 && threadIdx.x % kWarp == 0) {
      for (int t = 0; t < tokens; ++t) {
        store_qkv_pair(o, target, first + t, parts.sums[warp][t], parts.sums[warp + 1][t]);
      }
    }
    __syncthreads();
  }
}

__device__ float silu_times(float gate, float up) { return gate / (1.0f + expf(-gate)) * up; }

// The feed-forward's hidden layer, silu(w1 x) * (w3 x): a warp per row of
// both (parts of a block of their own were slower: measured).
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp, kProductBlocksPerSm)
    gate_up_kernel(float* out, const float* x, DeviceMatrix w1, DeviceMatrix w3, int batch) {
  const int row = static_cast<int>(blockIdx.x) * kWarpsPerBlock + warp_in_block();
  if (row >= w1.rows) return;  // the whole warp: nothing below waits for the block
  const RowPart gate = row_part(w1, row, 0, w1.cols), up = row_part(w3, row, 0, w3.cols);
  for (int first = 0; first < batch; first += kTokensPerPass) {
    const int tokens = min(kTokensPerPass, batch - first);
    const float* xs = x + static_cast<std::size_t>(first) * w1.cols;
    float g[kTokensPerPass], u[kTokensPerPass];
    warp_dots(w1.type, gate, xs, w1.cols, tokens, g);
    warp_dots(w3.type, up, xs, w3.cols, tokens, u);
    for (int t = 0; t < tokens && threadIdx.x % kWarp == 0; ++t) {
      out[static_cast<std::size_t>(first + t) * w1.rows + row] = silu_times(g[t], u[t]);
    }
  }
}

// A decode step's products (a batch of one row) whose input fits a warp's
// registers: each lane holds the same values of the input for every row
// (vectors lane, lane + 32, ... of kLoadsInFlight), so a row costs its
// weights' loads and nothing else. Warps stay resident and take rows in
// turn, kDecodeBlocksPerSm blocks a multiprocessor. The first row's loads
// are issued before the input is read, so that reading it (and working out
// an RMSNorm of it) hides behind them.
constexpr int kDecodeBlocksPerSm = 2;
constexpr int kDecodeInputFloats = kWarp * kLoadsInFlight * 8;  // F16's vectors of 8

template <cpu::WeightType Type>
struct LaneRow {
  typename VectorLoad<Type>::Raw raw[kLoadsInFlight];
};

template <cpu::WeightType Type>
__device__ void load_lane_row(LaneRow<Type>& row, const std::byte* bytes, int cols) {
  using Raw = typename VectorLoad<Type>::Raw;
  const int lane = threadIdx.x % kWarp, vectors = cols / VectorLoad<Type>::kValues;
  const auto* raw_row = reinterpret_cast<const Raw*>(bytes);
#pragma unroll
  for (int u = 0; u < kLoadsInFlight; ++u) {
    const int c = lane + u * kWarp;
    row.raw[u] = c < vectors ? __ldg(raw_row + c) : Raw{};
  }
}

// The input, weighed by `norm`'s weights where it has them, and the scale
// each dot product takes: RMSNorm(x) . row = inverse * ((weight * x) . row).
template <cpu::WeightType Type>
struct LaneInput {
  float values[kLoadsInFlight][VectorLoad<Type>::kValues];
  float scale;
};

// The block stages the input in shared memory (a round of vector loads),
// and each lane takes its values from there. Every thread of the block
// calls it.
template <cpu::WeightType Type>
__device__ void load_lane_input(LaneInput<Type>& in, const float* x, int cols, const InputNorm& norm) {
  using Load = VectorLoad<Type>;
  __shared__ float4 staged[kDecodeInputFloats / 4];
  __shared__ float reduce[kWarp];
  float squares = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < cols / 4; i += static_cast<int>(blockDim.x)) {
    float4 v = reinterpret_cast<const float4*>(x)[i];
    squares += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    if (norm.weight != nullptr) {
      const float4 w = reinterpret_cast<const float4*>(norm.weight)[i];
      v = {w.x * v.x, w.y * v.y, w.z * v.z, w.w * v.w};
    }
    staged[i] = v;
  }
  const float total = block_reduce<false>(squares, reduce);  // its barriers publish the staged input
  in.scale = norm.weight != nullptr ? 1.0f / sqrtf(total / static_cast<float>(cols) + norm.eps) : 1.0f;
  const int lane = threadIdx.x % kWarp, vectors = cols / Load::kValues;
#pragma unroll
  for (int u = 0; u < kLoadsInFlight; ++u) {
    const int c = lane + u * kWarp;
#pragma unroll
    for (int j = 0; j < Load::kValues / 4; ++j) {
      const float4 v = c < vectors ? staged[c * (Load::kValues / 4) + j] : float4{};
      in.values[u][4 * j] = v.x;
      in.values[u][4 * j + 1] = v.y;
      in.values[u][4 * j + 2] = v.z;
      in.values[u][4 * j + 3] = v.w;
    }
  }
}

// dot(row, input) times the input's scale, in every lane of the warp.
template <cpu::WeightType Type>
__device__ float lane_dot(const LaneRow<Type>& row, const LaneInput<Type>& in) {
  using Load = VectorLoad<Type>;
  float sum = 0.0f;
#pragma unroll
  for (int u = 0; u < kLoadsInFlight; ++u) {
    float w[Load::kValues];
    Load::to_floats(row.raw[u], w);
#pragma unroll
    for (int k = 0; k < Load::kValues; ++k) sum += w[k] * in.values[u][k];
  }
  return warp_sum(sum) * in.scale;
}

// This warp's first unit of work and the stride to its next: every warp of
// the grid takes units in turn.
__device__ int first_unit() { return static_cast<int>(blockIdx.x) * kWarpsPerBlock + warp_in_block(); }
__device__ int unit_stride() { return static_cast<int>(gridDim.x) * kWarpsPerBlock; }

template <cpu::WeightType Type, bool Accumulate>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp, kDecodeBlocksPerSm)
    decode_matmul_kernel(float* out, const float* x, DeviceMatrix w) {
  LaneRow<Type> row;
  int r = first_unit();
  if (r < w.rows) load_lane_row(row, w.row(r), w.cols);
  LaneInput<Type> in;
  load_lane_input(in, x, w.cols, InputNorm{});
  for (; r < w.rows; r += unit_stride()) {
    if (r != first_unit()) load_lane_row(row, w.row(r), w.cols);
    const float sum = lane_dot(row, in);
    if (threadIdx.x % kWarp == 0) out[r] = Accumulate ? out[r] + sum : sum;
  }
}

// A warp per row, a block's eight rows at a time: the rows a rotation
// joins meet in shared memory.
template <cpu::WeightType Type>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp, kDecodeBlocksPerSm)
    decode_qkv_kernel(QkvOutputs o, const float* x, InputNorm norm, DeviceMatrix wq, DeviceMatrix wk, DeviceMatrix wv) {
  __shared__ float sums[kWarpsPerBlock];
  const int rows = wq.rows + wk.rows + wv.rows, warp = warp_in_block();
  const bool first_lane = threadIdx.x % kWarp == 0;
  const int first_row = static_cast<int>(blockIdx.x) * kWarpsPerBlock;
  LaneRow<Type> row;
  if (first_row + warp < rows) {
    const QkvRow target = qkv_row(o, wq, wk, wv, first_row + warp);
    load_lane_row(row, target.w.row(target.row), wq.cols);
  }
  LaneInput<Type> in;
  load_lane_input(in, x, wq.cols, norm);
  for (int first = first_row; first < rows; first += unit_stride()) {
    const bool valid = first + warp < rows;
    const QkvRow target = qkv_row(o, wq, wk, wv, valid ? first + warp : 0);
    if (valid && first != first_row) load_lane_row(row, target.w.row(target.row), wq.cols);
    const float sum = valid ? lane_dot(row, in) : 0.0f;
    if (first_lane) sums[warp] = sum;
    __syncthreads();
    if (valid && warp % 2 == 0 && first_lane) store_qkv_pair(o, target, 0, sums[warp], sums[warp + 1]);
    __syncthreads();  // the sums are read before the next rows write them
  }
}

template <cpu::WeightType Type>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp, kDecodeBlocksPerSm)
    decode_gate_up_kernel(float* out, const float* x, InputNorm norm, DeviceMatrix w1, DeviceMatrix w3) {
  LaneRow<Type> row;
  int r = first_unit();
  if (r < w1.rows) load_lane_row(row, w1.row(r), w1.cols);
  LaneInput<Type> in;
  load_lane_input(in, x, w1.cols, norm);
  for (; r < w1.rows; r += unit_stride()) {
    if (r != first_unit()) load_lane_row(row, w1.row(r), w1.cols);
    const float gate = lane_dot(row, in);
    load_lane_row(row, w3.row(r), w3.cols);
    const float up = lane_dot(row, in);
    if (threadIdx.x % kWarp == 0) out[r] = silu_times(gate, up);
  }
}

// The parts a row of `cols` columns splits into for matmul_kernel: each at
// least kPartCols wide (a round of loads of F16) and a multiple of 256
// columns (of the vector loads and of Q8_0 blocks).
int splits_for(int cols) {
  constexpr int kPartCols = 2048;
  int splits = 1;
  while (splits < kWarpsPerBlock && cols % (2 * splits * 256) == 0 && cols / (2 * splits) >= kPartCols) splits *= 2;
  return splits;
}

// Launches a product of `warps` warps, kWarpsPerBlock a block.
template <class... Params, class... Args>
void launch_warps(cudaStream_t stream, int warps, void (*kernel)(Params...), Args&&... args) {
  const auto blocks = static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
  kernel<<<blocks, kWarpsPerBlock * kWarp, 0, stream>>>(std::forward<Args>(args)...);
  check_launch();
}

// Whether a product of a batch over these matrices takes the decode
// kernels: one row, F32 or F16 alike, and rows short enough that a warp's
// registers hold the input (kLoadsInFlight vector loads a lane).
template <class... Matrices>
bool takes_decode_kernels(int batch, const DeviceMatrix& w, const Matrices&... more) {
  const int values = w.type == cpu::WeightType::f32   ? VectorLoad<cpu::WeightType::f32>::kValues
                     : w.type == cpu::WeightType::f16 ? VectorLoad<cpu::WeightType::f16>::kValues
                                                      : 0;
  return batch == 1 && values > 0 && ((more.type == w.type) && ...) && w.cols % values == 0 &&
         w.cols / values <= kWarp * kLoadsInFlight;
}

// Launches a decode kernel over `units` units of work (a warp each), for F32
// or F16 weights: enough blocks to fill the device, no more than the units.
template <class... Params, class... Args>
void launch_decode(cudaStream_t stream, int units, cpu::WeightType type, void (*f32)(Params...), void (*f16)(Params...),
                   Args&&... args) {
  int device = 0, multiprocessors = 0;
  ACCORD_CUDA_CHECK(cudaGetDevice(&device));
  ACCORD_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
  const int blocks = std::min(multiprocessors * kDecodeBlocksPerSm, (units + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const auto kernel = type == cpu::WeightType::f32 ? f32 : f16;
  kernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * kWarp, 0, stream>>>(std::forward<Args>(args)...);
  check_launch();
}

// out = x w^T, or += when Accumulate.
template <bool Accumulate>
void launch_product(cudaStream_t stream, float* out, const float* x, const DeviceMatrix& w, int batch) {
  if (takes_decode_kernels(batch, w)) {
    launch_decode(stream, w.rows, w.type, decode_matmul_kernel<cpu::WeightType::f32, Accumulate>,
                  decode_matmul_kernel<cpu::WeightType::f16, Accumulate>, out, x, w);
    return;
  }
  const int splits = splits_for(w.cols);
  launch_warps(stream, w.rows * splits, matmul_kernel<Accumulate>, out, x, w, batch, splits);
}

// x, or where `norm` has a weight its RMSNorm, in norm.scratch.
const float* normalized(cudaStream_t stream, const float* x, const InputNorm& norm, int rows, int n) {
  if (norm.weight == nullptr) return x;
  rmsnorm(stream, norm.scratch, x, norm.weight, rows, n, norm.eps);
  return norm.scratch;
}

}  // namespace

void matmul(cudaStream_t stream, float* out, const float* x, const DeviceMatrix& w, int batch) {
  launch_product<false>(stream, out, x, w, batch);
}

void matmul_add(cudaStream_t stream, float* out, const float* x, const DeviceMatrix& w, int batch) {
  launch_product<true>(stream, out, x, w, batch);
}

void qkv(cudaStream_t stream, const QkvOutputs& out, const float* x, const InputNorm& norm, const DeviceMatrix& wq,
         const DeviceMatrix& wk, const DeviceMatrix& wv, int batch) {
  if (takes_decode_kernels(batch, wq, wk, wv)) {
    launch_decode(stream, wq.rows + wk.rows + wv.rows, wq.type, decode_qkv_kernel<cpu::WeightType::f32>,
                  decode_qkv_kernel<cpu::WeightType::f16>, out, x, norm, wq, wk, wv);
    return;
  }
  const float* input = normalized(stream, x, norm, batch, wq.cols);
  launch_warps(stream, wq.rows + wk.rows + wv.rows, qkv_kernel, out, input, wq, wk, wv, batch);
}

void gate_up(cudaStream_t stream, float* out, const float* x, const InputNorm& norm, const DeviceMatrix& w1,
             const DeviceMatrix& w3, int batch) {
  if (takes_decode_kernels(batch, w1, w3)) {
    launch_decode(stream, w1.rows, w1.type, decode_gate_up_kernel<cpu::WeightType::f32>,
                  decode_gate_up_kernel<cpu::WeightType::f16>, out, x, norm, w1, w3);
    return;
  }
  const float* input = normalized(stream, x, norm, batch, w1.cols);
  launch_warps(stream, w1.rows, gate_up_kernel, out, input, w1, w3, batch);
}

}  // namespace accord::cuda
