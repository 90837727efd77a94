// Elementwise kernels of the forward pass, written once as templates over
// a path's vector type V (matmul_tiles.hpp says why templates) and
// compiled per path, so each vectorizes them for its own registers. Only
// +, -, *, / and selects: every path rounds them alike. Internal to
// kernels/cpu.
#pragma once

#include <cstdint>

#include "kernels/cpu/kernel_table.hpp"

namespace accord::cpu::tiles {

// e^x within 2 ulp (Cephes' polynomial, reduced by ln 2 in two parts),
// with no library call, so the loops that use it vectorize, and no fused
// multiply-add, so every compiler rounds it alike. Below -86 it gives
// e^-86 (a normal float, where the library would give smaller ones), above
// 88.7 infinity; NaN stays NaN.
template <class V>
float exp_poly(float x) {
  const float number = x == x ? x : 0.0f;  // selects, not branches
  const float clamped = number < -86.0f ? -86.0f : (number > 88.7f ? 88.7f : number);
  // n = round(clamped / ln 2), in [-124, 128]: adding 1.5 * 2^23 leaves no fraction bits.
  constexpr float kRound = 12582912.0f;
  const float n = (clamped * 1.44269504088896341f + kRound) - kRound;
  const float r = (clamped - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // 2^n as 2^(n - 1) * 2, so that n = 128 (e^88.7) needs no exponent past the largest.
  const std::int32_t exponent = (static_cast<std::int32_t>(n) + 126) << 23;
  float half_scale;
  __builtin_memcpy(&half_scale, &exponent, sizeof half_scale);
  const float result = number > 88.7f ? __builtin_inff() : p * half_scale * 2.0f;
  return x == x ? result : x;
}

// silu_mul (ops.hpp).
template <class V>
void silu_mul(float* gate, const float* up, int n) {
  for (int i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g * (1.0f / (1.0f + exp_poly<V>(-g))) * up[i];
  }
}

// GCC's _mm512_reduce_add_ps over 16 floats (ggml's and tinyBLAS's
// reductions): halves, quarters, then pairs.
template <class V>
float reduce16_ggml(const float* a) {
  float quarter[4];
  for (int i = 0; i < 4; ++i) quarter[i] = (a[12 + i] + a[4 + i]) + (a[8 + i] + a[i]);
  return (quarter[0] + quarter[2]) + (quarter[1] + quarter[3]);
}

// e^x as ggml's ggml_v_expf computes it with AVX512 (its SwiGLU's and
// softmax's exponential): n = round(x / ln 2), b = x - n ln 2 in two fused
// steps, a degree-5 polynomial of b in fused steps, then b's value times
// 2^n (exact, as VSCALEFPS). |n| > 192 gives 0 for n < 0, else infinity;
// NaN stays NaN.
template <class V>
float exp_ggml(float x) {
  constexpr float kRound = 0x1.8p23f;
  const float n = __builtin_fmaf(x, 0x1.715476p+0f, kRound) - kRound;
  const float b = __builtin_fmaf(-n, 0x1.7f7d1cp-20f, __builtin_fmaf(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = __builtin_fmaf(__builtin_fmaf(__builtin_fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                                __builtin_fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                                 u, __builtin_fmaf(0x1.ffffecp-1f, b, 1.0f));
  if (n != n) return n;
  if (__builtin_fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : __builtin_inff();
  return __builtin_ldexpf(j, static_cast<int>(n));
}

// silu_mul_ggml (ops.hpp): ggml_vec_swiglu_f32's x / (1 + e^-x) * g.
template <class V>
void silu_mul_ggml(float* gate, const float* up, int n) {
  for (int i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + exp_ggml<V>(0.0f - gate[i])) * up[i];
}

// Attention's weights from a query's scores: scores / scale, then their
// softmax (e^(s - max) / sum, the sum in order).
template <class V>
void attention_weights(float* scores, int n, float scale) {
  for (int i = 0; i < n; ++i) scores[i] /= scale;
  float max = scores[0];
  for (int i = 1; i < n; ++i) max = scores[i] > max ? scores[i] : max;
  for (int i = 0; i < n; ++i) scores[i] = exp_poly<V>(scores[i] - max);
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += scores[i];
  for (int i = 0; i < n; ++i) scores[i] /= sum;
}

}  // namespace accord::cpu::tiles
