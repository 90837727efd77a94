// The products of BF16 weights with activations rounded to BF16, in the
// order kernel_table.hpp defines (llama.cpp's CPU backend with AVX512-BF16),
// written once over a path's vector type V (matmul_tiles.hpp says why
// templates). Internal to kernels/cpu.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/vector_math.hpp"

namespace accord::cpu::tiles {

template <class V>
float bf16_at(const std::byte* row, int i) {
  std::uint16_t h;
  __builtin_memcpy(&h, row + 2 * static_cast<std::size_t>(i), sizeof h);
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}

// VDPBF16PS's step for lane j of the 32 values from `at`: the odd value's
// product, then the even one's, each an fma.
template <class V>
void bf16_pair_steps(const std::byte* row, const float* x, int at, float* lanes) {
  for (int j = 0; j < 16; ++j) {
    const int i = at + 2 * j;
    lanes[j] = __builtin_fmaf(bf16_at<V>(row, i + 1), x[i + 1], lanes[j]);
    lanes[j] = __builtin_fmaf(bf16_at<V>(row, i), x[i], lanes[j]);
  }
}

// ggml_vec_dot_bf16, which llama.cpp runs for one token (every token here,
// whatever the batch): per 64 values two accumulators of 32,
// each reduced, their sum and the values past the last 64 in double.
template <class V>
float bf16_vec_dot(const std::byte* row, const float* x, int n) {
  float low[16] = {}, high[16] = {};
  const int whole = n / 64 * 64;
  for (int i = 0; i < whole; i += 64) {
    bf16_pair_steps<V>(row, x, i, low);
    bf16_pair_steps<V>(row, x, i + 32, high);
  }
  double sum = static_cast<double>(reduce16_ggml<V>(low)) + static_cast<double>(reduce16_ggml<V>(high));
  for (int i = whole; i < n; ++i) sum += static_cast<double>(bf16_at<V>(row, i) * x[i]);
  return static_cast<float>(sum);
}

template <class V>
void bf16_rows(const Matrix& w, const Activations& x, float* out, int row_begin, int row_end) {
  for (int r = row_begin; r < row_end; ++r) {
    const std::byte* row = w.row(r);
    for (int t = 0; t < x.batch; ++t) {
      const float* input = x.bf16_values + static_cast<std::size_t>(t) * w.cols;
      out[static_cast<std::size_t>(t) * w.rows + r] = bf16_vec_dot<V>(row, input, w.cols);
    }
  }
}

}  // namespace accord::cpu::tiles
