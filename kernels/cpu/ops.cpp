#include "kernels/cpu/ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/matmul.hpp"

namespace accord::cpu {

void rmsnorm(float* out, const float* x, const float* weight, int n, float eps) {
  float ss = 0.0f;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  ss /= static_cast<float>(n);
  ss += eps;
  ss = 1.0f / std::sqrt(ss);
  for (int i = 0; i < n; ++i) out[i] = weight[i] * (ss * x[i]);
}

namespace {

// Rows per thread at least: a decode step's single row stays on the caller.
constexpr std::size_t kMinRowsPerChunk = 4;

// fn(row) for each of `rows` rows, on the pool's threads.
template <class Fn>
void for_each_row(ThreadPool& pool, int rows, const Fn& fn) {
  pool.parallel_for(
      static_cast<std::size_t>(rows),
      [&](std::size_t begin, std::size_t end) {
        for (std::size_t row = begin; row < end; ++row) fn(row);
      },
      kMinRowsPerChunk);
}

void add(float* x, const float* delta, int n) {
  for (int i = 0; i < n; ++i) x[i] += delta[i];
}

// e^x within 2 ulp (Cephes' polynomial, reduced by ln 2 in two parts) from
// +, -, * and selects only: no library call, so the loops that use it
// vectorize, and no fused multiply-add, so every compiler rounds it alike.
// Below -86 it gives e^-86 (a normal float, where the library would give
// smaller ones), above 88.7 infinity; NaN stays NaN.
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
  std::memcpy(&half_scale, &exponent, sizeof half_scale);
  const float result = number > 88.7f ? std::numeric_limits<float>::infinity() : p * half_scale * 2.0f;
  return x == x ? result : x;
}

// softmax with the given exponential: the sampler keeps the library's, as
// run.c does; attention's weights take exp_poly.
template <float (*Exp)(float)>
void softmax_with(float* x, int n) {
  float max = x[0];
  for (int i = 1; i < n; ++i) max = std::max(max, x[i]);
  for (int i = 0; i < n; ++i) x[i] = Exp(x[i] - max);
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += x[i];
  for (int i = 0; i < n; ++i) x[i] /= sum;
}

float library_exp(float x) { return std::exp(x); }

}  // namespace

void rmsnorm_rows(ThreadPool& pool, float* out, const float* x, const float* weight, int rows, int n, float eps) {
  const auto width = static_cast<std::size_t>(n);
  for_each_row(pool, rows, [&](std::size_t row) { rmsnorm(out + row * width, x + row * width, weight, n, eps); });
}

void add_rmsnorm_rows(ThreadPool& pool, float* x, const float* delta, float* out, const float* weight, int rows, int n,
                      float eps) {
  const auto width = static_cast<std::size_t>(n);
  for_each_row(pool, rows, [&](std::size_t row) {
    add(x + row * width, delta + row * width, n);
    rmsnorm(out + row * width, x + row * width, weight, n, eps);
  });
}

void add_rows(ThreadPool& pool, float* x, const float* delta, int rows, int n) {
  const auto width = static_cast<std::size_t>(n);
  for_each_row(pool, rows, [&](std::size_t row) { add(x + row * width, delta + row * width, n); });
}

void softmax(float* x, int n) { softmax_with<library_exp>(x, n); }

void rope(float* v, int n_heads, int head_size, const float* cos, const float* sin) {
  for (int h = 0; h < n_heads; ++h) {
    float* head = v + static_cast<std::size_t>(h) * head_size;
    for (int j = 0; j < head_size / 2; ++j) {
      const float v0 = head[2 * j];
      const float v1 = head[2 * j + 1];
      head[2 * j] = v0 * cos[j] - v1 * sin[j];
      head[2 * j + 1] = v0 * sin[j] + v1 * cos[j];
    }
  }
}

void rope_tables(float* cos, float* sin, int seq_len, int head_size, float theta) {
  const int half = head_size / 2;
  for (int pos = 0; pos < seq_len; ++pos) {
    for (int j = 0; j < half; ++j) {
      const float freq = 1.0f / std::pow(theta, static_cast<float>(2 * j) / static_cast<float>(head_size));
      const float angle = static_cast<float>(pos) * freq;
      cos[static_cast<std::size_t>(pos) * half + j] = std::cos(angle);
      sin[static_cast<std::size_t>(pos) * half + j] = std::sin(angle);
    }
  }
}

void silu_mul(float* gate, const float* up, int n) {
  for (int i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g * (1.0f / (1.0f + exp_poly(-g))) * up[i];
  }
}

void attention(ThreadPool& pool, float* out, const float* q, KvView kv, int batch, int first_pos, int n_heads,
               int n_kv_heads, int head_size) {
  const int group = n_heads / n_kv_heads;
  const int q_dim = n_heads * head_size;
  const float scale = std::sqrt(static_cast<float>(head_size));
  // One task per (token, head); each owns its output slice and its scores.
  // A later token attends to more positions, so tokens are dealt from both
  // ends (0, B-1, 1, B-2, ...) and contiguous chunks of tasks weigh alike.
  pool.parallel_for(static_cast<std::size_t>(batch) * n_heads, [&](std::size_t begin, std::size_t end) {
    std::vector<float> scores(static_cast<std::size_t>(first_pos + batch));
    for (std::size_t task = begin; task < end; ++task) {
      const int dealt = static_cast<int>(task / n_heads);
      const int t = dealt % 2 == 0 ? dealt / 2 : batch - 1 - dealt / 2;
      const int h = static_cast<int>(task % n_heads);
      const int pos = first_pos + t;
      const std::size_t kv_offset = static_cast<std::size_t>(h / group) * head_size;
      const float* qh = q + static_cast<std::size_t>(t) * q_dim + static_cast<std::size_t>(h) * head_size;
      dots(kv.keys + kv_offset, static_cast<std::size_t>(kv.kv_dim), pos + 1, qh, head_size, scores.data());
      for (int p = 0; p <= pos; ++p) scores[p] /= scale;
      softmax_with<exp_poly>(scores.data(), pos + 1);
      float* oh = out + static_cast<std::size_t>(t) * q_dim + static_cast<std::size_t>(h) * head_size;
      std::fill(oh, oh + head_size, 0.0f);
      for (int p = 0; p <= pos; ++p) {
        axpy(scores[p], kv.values + static_cast<std::size_t>(p) * kv.kv_dim + kv_offset, oh, head_size);
      }
    }
  });
}

}  // namespace accord::cpu
