// The products of BF16 weights with activations rounded to BF16, in the
// order kernel_table.hpp defines (llama.cpp's CPU backend with AVX512-BF16),
// written once over a path's vector type V (matmul_tiles.hpp says why
// templates). Internal to kernels/cpu.
#pragma once

#include <algorithm>
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

// Values of a row converted at once (a multiple of 64), and tokens whose
// lanes a row keeps while its chunks pass: each BF16 value is converted
// once per group of tokens, on the stack.
inline constexpr int kBf16Chunk = 1024;
inline constexpr int kBf16Tokens = 64;

// VDPBF16PS's step for 32 values: lane j takes the product of value
// 2j + 1, then of value 2j, each an fma. `odd` and `even` hold the
// weights' values 2j + 1 and 2j; x the token's 32 values.
template <class V>
void pair_steps(const float* odd, const float* even, const float* x, float* lanes) {
  for (int j = 0; j < 16; ++j) {
    lanes[j] = __builtin_fmaf(odd[j], x[2 * j + 1], lanes[j]);
    lanes[j] = __builtin_fmaf(even[j], x[2 * j], lanes[j]);
  }
}

// ggml_vec_dot_bf16, which llama.cpp runs for one token (every token here,
// whatever the batch): per 64 values two accumulators of 16 lanes (low,
// high), each reduced, their sum and the values past the last 64 in
// double. Row r of w against tokens [tok0, tok0 + count).
template <class V>
void bf16_row(const Matrix& w, const Activations& x, float* out, int r, int tok0, int count) {
  const int n = w.cols, whole = n / 64 * 64;
  const std::byte* row = w.row(r);
  // Zeroed for the tokens there are: all kBf16Tokens would be 8 KB of
  // stores a row, four times a 1024-column row's bytes.
  float low[kBf16Tokens][16], high[kBf16Tokens][16];
  for (int t = 0; t < count; ++t) {
    std::fill_n(low[t], 16, 0.0f);
    std::fill_n(high[t], 16, 0.0f);
  }
  float odd[kBf16Chunk / 2], even[kBf16Chunk / 2];
  for (int c = 0; c < whole; c += kBf16Chunk) {
    const int pairs = (whole - c < kBf16Chunk ? whole - c : kBf16Chunk) / 2;
    for (int p = 0; p < pairs; ++p) {
      odd[p] = bf16_at<V>(row, c + 2 * p + 1);
      even[p] = bf16_at<V>(row, c + 2 * p);
    }
    for (int t = 0; t < count; ++t) {
      const float* input = x.bf16_values + static_cast<std::size_t>(tok0 + t) * n + c;
      for (int p = 0; p < pairs; p += 32) {
        pair_steps<V>(odd + p, even + p, input + 2 * p, low[t]);
        pair_steps<V>(odd + p + 16, even + p + 16, input + 2 * p + 32, high[t]);
      }
    }
  }
  for (int t = 0; t < count; ++t) {
    const float* input = x.bf16_values + static_cast<std::size_t>(tok0 + t) * n;
    double sum = static_cast<double>(reduce16_ggml<V>(low[t])) + static_cast<double>(reduce16_ggml<V>(high[t]));
    for (int i = whole; i < n; ++i) sum += static_cast<double>(bf16_at<V>(row, i) * input[i]);
    out[static_cast<std::size_t>(tok0 + t) * w.rows + r] = static_cast<float>(sum);
  }
}

template <class V>
void bf16_rows(const Matrix& w, const Activations& x, float* out, int row_begin, int row_end) {
  for (int t = 0; t < x.batch; t += kBf16Tokens) {
    const int count = x.batch - t < kBf16Tokens ? x.batch - t : kBf16Tokens;
    for (int r = row_begin; r < row_end; ++r) bf16_row<V>(w, x, out, r, t, count);
  }
}

}  // namespace accord::cpu::tiles
