#include "kernels/cpu/ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/quant.hpp"
#include "kernels/cpu/vector_math.hpp"

namespace accord::cpu {

void rmsnorm(float* out, const float* x, const float* weight, int n, float eps, NormSum sum) {
  float ss = 0.0f;
  if (sum == NormSum::ggml) {
    double squares = 0.0;
    for (int i = 0; i < n; ++i) squares += static_cast<double>(x[i] * x[i]);
    ss = static_cast<float>(squares / n);
  } else {
    for (int i = 0; i < n; ++i) ss += x[i] * x[i];
    ss /= static_cast<float>(n);
  }
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

}  // namespace

void rmsnorm_rows(ThreadPool& pool, float* out, const float* x, const float* weight, int rows, int n, float eps,
                  NormSum sum) {
  const auto width = static_cast<std::size_t>(n);
  for_each_row(pool, rows, [&](std::size_t row) { rmsnorm(out + row * width, x + row * width, weight, n, eps, sum); });
}

void add_rmsnorm_rows(ThreadPool& pool, float* x, const float* delta, float* out, const float* weight, int rows, int n,
                      float eps, NormSum sum) {
  const auto width = static_cast<std::size_t>(n);
  for_each_row(pool, rows, [&](std::size_t row) {
    add(x + row * width, delta + row * width, n);
    rmsnorm(out + row * width, x + row * width, weight, n, eps, sum);
  });
}

void add_rows(ThreadPool& pool, float* x, const float* delta, int rows, int n) {
  const auto width = static_cast<std::size_t>(n);
  for_each_row(pool, rows, [&](std::size_t row) { add(x + row * width, delta + row * width, n); });
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

void softmax_ggml(float* x, int n) {
  float max = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
  double sum = 0.0;
  const int whole = n / 16 * 16;
  // exp_ggml and reduce16_ggml round alike on every path: scalar code, the
  // vector type only a tag.
  for (int b = 0; b < whole; b += 16) {
    for (int l = 0; l < 16; ++l) x[b + l] = tiles::exp_ggml<float>(x[b + l] - max);
    sum += static_cast<double>(tiles::reduce16_ggml<float>(x + b));
  }
  for (int i = whole; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += static_cast<double>(x[i]);
  }
  const auto inverse = static_cast<float>(1.0 / sum);
  for (int i = 0; i < n; ++i) x[i] *= inverse;
}

namespace {

// One pair's rotation; `fused` as ggml's rotate_pairs is compiled (GCC
// contracts each of its two sums into an fma of the first product).
void rotate(float& a, float& b, float cos, float sin, bool fused) {
  const float v0 = a, v1 = b;
  if (fused) {
    a = std::fma(v0, cos, -(v1 * sin));
    b = std::fma(v0, sin, v1 * cos);
  } else {
    a = v0 * cos - v1 * sin;
    b = v0 * sin + v1 * cos;
  }
}

}  // namespace

void rope(float* v, int n_heads, int head_size, const float* cos, const float* sin, bool fused) {
  for (int h = 0; h < n_heads; ++h) {
    float* head = v + static_cast<std::size_t>(h) * head_size;
    for (int j = 0; j < head_size / 2; ++j) rotate(head[2 * j], head[2 * j + 1], cos[j], sin[j], fused);
  }
}

void rope_neox(float* v, int n_heads, int head_size, const float* cos, const float* sin, bool fused) {
  const int half = head_size / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* head = v + static_cast<std::size_t>(h) * head_size;
    for (int j = 0; j < half; ++j) rotate(head[j], head[j + half], cos[j], sin[j], fused);
  }
}

void rope_tables_ggml(float* cos, float* sin, int seq_len, int head_size, const RopeAngles& angles, int first) {
  const int half = head_size / 2;
  const float theta_scale = std::pow(angles.theta, -2.0f / static_cast<float>(head_size));
  for (int pos = first; pos < seq_len; ++pos) {
    float angle = static_cast<float>(pos);
    for (int j = 0; j < half; ++j) {
      const float extrapolated = angles.factors != nullptr ? angle / angles.factors[j] : angle;
      const float scaled = angles.freq_scale * extrapolated;
      cos[static_cast<std::size_t>(pos) * half + j] = std::cos(scaled) * angles.scale;
      sin[static_cast<std::size_t>(pos) * half + j] = std::sin(scaled) * angles.scale;
      angle *= theta_scale;
    }
  }
}

void rope_tables(float* cos, float* sin, int seq_len, int head_size, float theta, int first) {
  const int half = head_size / 2;
  for (int pos = first; pos < seq_len; ++pos) {
    for (int j = 0; j < half; ++j) {
      const float freq = 1.0f / std::pow(theta, static_cast<float>(2 * j) / static_cast<float>(head_size));
      const float angle = static_cast<float>(pos) * freq;
      cos[static_cast<std::size_t>(pos) * half + j] = std::cos(angle);
      sin[static_cast<std::size_t>(pos) * half + j] = std::sin(angle);
    }
  }
}

void silu_mul(float* gate, const float* up, int n) { active_kernels().silu_mul(gate, up, n); }

void silu_mul_ggml(float* gate, const float* up, int n) { active_kernels().silu_mul_ggml(gate, up, n); }

namespace {

// ggml's gelu_f32, whose results its CPU backend tabulates per F16 input.
float gelu_tanh(float x) {
  constexpr float kCoefA = 0.044715f;
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCoefA * x * x)));
}

// GELU of every F16 value, rounded to F16 and widened back.
const std::vector<float>& gelu_table() {
  static const std::vector<float> table = [] {
    std::vector<float> values(1 << 16);
    for (std::size_t h = 0; h < values.size(); ++h) {
      values[h] = f16_to_f32(f32_to_f16(gelu_tanh(f16_to_f32(static_cast<std::uint16_t>(h)))));
    }
    return values;
  }();
  return table;
}

}  // namespace

void gelu_tanh_mul(float* gate, const float* up, int n) {
  const std::vector<float>& table = gelu_table();
  for (int i = 0; i < n; ++i) {
    const float x = gate[i];
    const float gelu = x <= -10.0f ? 0.0f : (x >= 10.0f ? x : table[f32_to_f16(x)]);
    gate[i] = gelu * up[i];
  }
}

void attention(ThreadPool& pool, float* out, const float* q, KvView kv, int batch, int first_pos, int n_heads,
               int n_kv_heads, int head_size) {
  attention(pool, out, q, kv, batch, first_pos,
            {n_heads, n_kv_heads, head_size, std::sqrt(static_cast<float>(head_size)), 0});
}

void kv_dots(KvElement element, const KvRows& keys, int first, int count, const float* x, int n, float* out) {
  active_kernels().kv_dots[static_cast<int>(element)](keys, first, count, x, n, out);
}

void kv_weighted_sum(KvElement element, const float* weights, const KvRows& values, int first, int count, int n,
                     float* y) {
  active_kernels().kv_weighted_sum[static_cast<int>(element)](weights, values, first, count, n, y);
}

namespace {

// Query head h of token t at position pos: its scores, softmax and
// weighted values into out, over the rows of its KV head.
void attend_head(const KvView& kv, const AttentionHeads& heads, const float* q, int h, int pos, float* scores,
                 float* out) {
  const int head_size = heads.head_size;
  const auto row_bytes = kv_bytes(kv.element, static_cast<std::size_t>(kv.kv_dim));
  const int head_first = h / (heads.n_heads / heads.n_kv_heads) * head_size;
  const int lead = kv.element == KvElement::q8_0 ? head_first % kKvGroup : 0;
  const auto head_bytes = kv_bytes(kv.element, static_cast<std::size_t>(head_first - lead));
  const KvRows keys{kv.blocks, kv.key_offset + head_bytes, row_bytes, kv.block_shift, lead};
  const KvRows values{kv.blocks, kv.value_offset + head_bytes, row_bytes, kv.block_shift, lead};
  const int start = heads.window > 0 ? std::max(0, pos - heads.window + 1) : 0;
  const int count = pos + 1 - start;
  if (heads.ggml) {
    active_kernels().attend_ggml[static_cast<int>(kv.element)](
        {q, keys, values, head_size, start, pos, 1.0f / heads.score_divisor, scores, out});
    return;
  }
  kv_dots(kv.element, keys, start, count, q, head_size, scores);
  active_kernels().attention_weights(scores, count, heads.score_divisor);
  std::fill_n(out, head_size, 0.0f);
  kv_weighted_sum(kv.element, scores, values, start, count, head_size, out);
}

}  // namespace

void attention(ThreadPool& pool, float* out, const float* q, KvView kv, int batch, int first_pos,
               const AttentionHeads& heads) {
  const int n_heads = heads.n_heads, head_size = heads.head_size;
  const int q_dim = n_heads * head_size;
  // One task per (token, head); each owns its output slice and its scores.
  // A later token attends to more positions, so tokens are dealt from both
  // ends (0, B-1, 1, B-2, ...) and contiguous chunks of tasks weigh alike.
  pool.parallel_for(static_cast<std::size_t>(batch) * n_heads, [&](std::size_t begin, std::size_t end) {
    // A buffer of the thread's own, grown to the longest context seen, so
    // that a decode step allocates nothing.
    thread_local std::vector<float> scores;
    scores.resize(std::max(scores.size(), static_cast<std::size_t>(first_pos + batch)));
    for (std::size_t task = begin; task < end; ++task) {
      const int dealt = static_cast<int>(task / n_heads);
      const int t = dealt % 2 == 0 ? dealt / 2 : batch - 1 - dealt / 2;
      const int h = static_cast<int>(task % n_heads);
      const std::size_t at = static_cast<std::size_t>(t) * q_dim + static_cast<std::size_t>(h) * head_size;
      attend_head(kv, heads, q + at, h, first_pos + t, scores.data(), out + at);
    }
  });
}

}  // namespace accord::cpu
