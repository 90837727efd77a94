// What the kernels' .cu files share (kernels.cu, products.cu): warp and
// block reductions, reading a weight of any type, and the check after a
// launch. Internal to kernels/cuda: callers include kernels.cuh.
#pragma once

#include <cuda_fp16.h>

#include <cmath>
#include <cstddef>

#include "kernels/cpu/quant.hpp"
#include "kernels/cuda/check.cuh"

namespace accord::cuda {

inline constexpr int kWarp = 32;

__device__ inline float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ inline float warp_max(float v) {
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

__device__ inline float half_at(const std::byte* p) { return __half2float(*reinterpret_cast<const __half*>(p)); }

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

inline void check_launch() { ACCORD_CUDA_CHECK(cudaGetLastError()); }

}  // namespace accord::cuda
