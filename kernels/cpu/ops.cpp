#include "kernels/cpu/ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace accord::cpu {

// Built for AVX2 and for the baseline, picked at load time. The order of
// additions is written out in the code and FP contraction is off, so both
// clones give bit-identical results; AVX2 only holds the eight partial sums
// in one register instead of two.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ACCORD_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define ACCORD_SIMD_CLONES
#endif

namespace {

constexpr int kLanes = 8;

// Eight floats as one value (GCC/Clang vector extension): lane-wise
// arithmetic, one AVX register or two SSE registers.
typedef float Lanes __attribute__((vector_size(kLanes * sizeof(float))));

inline Lanes load_lanes(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The fixed combination of the partial sums shared by every dot product.
inline float combine(Lanes s) { return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])); }

// R rows of w (row r starts at w + r * stride) against x, each reduced in
// exactly the order of dot(): lane l sums the products i = l mod 8, the
// lanes combine in a fixed tree, then the tail adds in order. Several rows
// share every load of x.
template <int R>
[[gnu::always_inline]] inline void dot_rows(const float* w, std::size_t stride, const float* x, int n, float* out) {
  Lanes s[R] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const Lanes xv = load_lanes(x + i);
    for (int r = 0; r < R; ++r) s[r] += load_lanes(w + r * stride + i) * xv;
  }
  for (int r = 0; r < R; ++r) {
    float sum = combine(s[r]);
    for (int j = i; j < n; ++j) sum += w[r * stride + j] * x[j];
    out[r] = sum;
  }
}

// Rows [begin, end) of out = x * w^T, in blocks of four rows per pass over
// each token of the batch.
ACCORD_SIMD_CLONES void matmul_rows(float* out, const float* x, const float* w, int batch, int cols, int rows,
                                    std::size_t begin, std::size_t end) {
  constexpr int kBlock = 4;
  const auto stride = static_cast<std::size_t>(cols);
  float block[kBlock];
  std::size_t r = begin;
  for (; r + kBlock <= end; r += kBlock) {
    for (int t = 0; t < batch; ++t) {
      dot_rows<kBlock>(w + r * stride, stride, x + static_cast<std::size_t>(t) * stride, cols, block);
      for (int k = 0; k < kBlock; ++k) out[static_cast<std::size_t>(t) * rows + r + k] = block[k];
    }
  }
  for (; r < end; ++r) {
    for (int t = 0; t < batch; ++t) {
      dot_rows<1>(w + r * stride, stride, x + static_cast<std::size_t>(t) * stride, cols, block);
      out[static_cast<std::size_t>(t) * rows + r] = block[0];
    }
  }
}

}  // namespace

ACCORD_SIMD_CLONES float dot(const float* a, const float* b, int n) {
  float out;
  dot_rows<1>(a, 0, b, n, &out);
  return out;
}

void matmul(ThreadPool& pool, float* out, const float* x, const float* w, int batch, int cols, int rows) {
  // Rows are split among threads; each weight row is read once per batch.
  pool.parallel_for(
      static_cast<std::size_t>(rows),
      [&](std::size_t begin, std::size_t end) { matmul_rows(out, x, w, batch, cols, rows, begin, end); }, 16);
}

void rmsnorm(float* out, const float* x, const float* weight, int n, float eps) {
  float ss = 0.0f;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  ss /= static_cast<float>(n);
  ss += eps;
  ss = 1.0f / std::sqrt(ss);
  for (int i = 0; i < n; ++i) out[i] = weight[i] * (ss * x[i]);
}

void softmax(float* x, int n) {
  float max = x[0];
  for (int i = 1; i < n; ++i) max = std::max(max, x[i]);
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  for (int i = 0; i < n; ++i) x[i] /= sum;
}

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
    gate[i] = g * (1.0f / (1.0f + std::exp(-g))) * up[i];
  }
}

void attention(ThreadPool& pool, float* out, const float* q, KvView kv, int batch, int first_pos, int n_heads,
               int n_kv_heads, int head_size) {
  const int group = n_heads / n_kv_heads;
  const int q_dim = n_heads * head_size;
  const float scale = std::sqrt(static_cast<float>(head_size));
  // One task per (token, head); each owns its output slice and its scores.
  pool.parallel_for(static_cast<std::size_t>(batch) * n_heads, [&](std::size_t begin, std::size_t end) {
    std::vector<float> scores(static_cast<std::size_t>(first_pos + batch));
    for (std::size_t task = begin; task < end; ++task) {
      const int t = static_cast<int>(task / n_heads);
      const int h = static_cast<int>(task % n_heads);
      const int pos = first_pos + t;
      const std::size_t kv_offset = static_cast<std::size_t>(h / group) * head_size;
      const float* qh = q + static_cast<std::size_t>(t) * q_dim + static_cast<std::size_t>(h) * head_size;
      for (int p = 0; p <= pos; ++p) {
        scores[p] = dot(qh, kv.keys + static_cast<std::size_t>(p) * kv.kv_dim + kv_offset, head_size) / scale;
      }
      softmax(scores.data(), pos + 1);
      float* oh = out + static_cast<std::size_t>(t) * q_dim + static_cast<std::size_t>(h) * head_size;
      std::fill(oh, oh + head_size, 0.0f);
      for (int p = 0; p <= pos; ++p) {
        const float* vp = kv.values + static_cast<std::size_t>(p) * kv.kv_dim + kv_offset;
        const float a = scores[p];
        for (int i = 0; i < head_size; ++i) oh[i] += a * vp[i];
      }
    }
  });
}

}  // namespace accord::cpu
