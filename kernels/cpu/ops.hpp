// CPU kernels of the forward pass (of every architecture, docs/models.md)
// besides the matrix products (matmul.hpp): flat functions over float arrays.
//
// Determinism: every output element is reduced in one fixed order that
// depends neither on the pool size nor (but for ggml's attention, which
// weighs values as llama.cpp does for one token or for a batch) on the
// number of rows in a batch. Threads split work by token and head, never
// inside a reduction, so logits are bit-identical for any thread count.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/thread_pool.hpp"

namespace accord::cpu {

// How a norm sums its squares: in float in order, as llama2.c's run.c, or
// in double as ggml's rms_norm (each square rounded to float first, the
// mean rounded to float), as llama.cpp computes it.
enum class NormSum { in_float, ggml };

// out[i] = weight[i] * (x[i] / sqrt(mean(x^2) + eps)), the factor
// 1 / sqrt(mean + eps) rounded to float first.  out may alias x.
// x, weight, out: (n)
void rmsnorm(float* out, const float* x, const float* weight, int n, float eps, NormSum sum = NormSum::in_float);

// rmsnorm of each of `rows` rows; the pool's threads take rows.
// x, out: (rows, n)  weight: (n)
void rmsnorm_rows(ThreadPool& pool, float* out, const float* x, const float* weight, int rows, int n, float eps,
                  NormSum sum = NormSum::in_float);

// The residual connection and the norm after it, row by row in one pass:
// x += delta, then out = rmsnorm(x).  x, delta, out: (rows, n)
void add_rmsnorm_rows(ThreadPool& pool, float* x, const float* delta, float* out, const float* weight, int rows, int n,
                      float eps, NormSum sum = NormSum::in_float);

// x += delta, row by row.  x, delta: (rows, n)
void add_rows(ThreadPool& pool, float* x, const float* delta, int rows, int n);

// In place: x[i] = exp(x[i] - max) / sum.  x: (n)
void softmax(float* x, int n);

// softmax as ggml's soft_max computes it on the CPU with AVX512 (the router
// of llama.cpp's mixture of experts): e^(x - max) of each whole 16 values
// as ggml_v_expf, their sum reduced as _mm512_reduce_add_ps and added in
// double; of the rest through the C library's expf, each added in double;
// then times the inverse of the sum, rounded to float.  x: (n)
void softmax_ggml(float* x, int n);

// In place rotation of adjacent pairs (v[2j], v[2j+1]) of every head by the
// angle of pair index j. v: (n_heads, head_size); cos, sin: (head_size / 2)
// for the token's position. `fused`: as ggml computes it, each new value
// an fma of its first product and the rounded second (v0 * cos - v1 * sin
// as fma(v0, cos, -(v1 * sin))).
void rope(float* v, int n_heads, int head_size, const float* cos, const float* sin, bool fused = false);

// The same rotation of GPT-NeoX's halves: (v[j], v[j + head_size/2]).
void rope_neox(float* v, int n_heads, int head_size, const float* cos, const float* sin, bool fused = false);

// RoPE angle tables: cos and sin of pos * theta^(-2j / head_size) for every
// position and pair j, computed in float exactly as llama2.c's run.c does.
// cos, sin: (seq_len, head_size / 2); only the rows from position `first`
// on are written (each row is computed alone, so a table filled in parts
// equals one filled at once).
void rope_tables(float* cos, float* sin, int seq_len, int head_size, float theta, int first = 0);

// How ggml's RoPE forms its angles and their cos and sin.
struct RopeAngles {
  float theta = 10000.0f;          // the base
  const float* factors = nullptr;  // (head_size / 2) frequency factors, or null for ones
  float freq_scale = 1.0f;         // linear scaling of every angle
  float scale = 1.0f;              // of cos and sin
};

// The same tables as ggml computes them (ggml_rope_cache_init, rope_yarn
// without YaRN): the angle of pair j is freq_scale * (pos * s^j / factors[j]),
// s = theta^(-2 / head_size), its powers taken by repeated multiplication
// in float; cos and sin are then multiplied by `scale`.
void rope_tables_ggml(float* cos, float* sin, int seq_len, int head_size, const RopeAngles& angles, int first = 0);

// In place: gate[i] = silu(gate[i]) * up[i], the exponential within 2 ulp
// of e^x (a polynomial that vectorizes).  gate, up: (n)
void silu_mul(float* gate, const float* up, int n);

// silu_mul as ggml's CPU backend computes it (llama.cpp's SwiGLU on x86
// with AVX512): gate[i] / (1 + e^-gate[i]) * up[i], e^x as ggml_v_expf.
void silu_mul_ggml(float* gate, const float* up, int n);

// In place: gate[i] = gelu(gate[i]) * up[i], GELU's tanh form as ggml
// computes it on the CPU: through a table over half-precision inputs
// (gate rounded to F16, the result rounded to F16), 0 below -10 and the
// identity above 10.  gate, up: (n)
void gelu_tanh_mul(float* gate, const float* up, int n);

// The element type of a key/value cache: F32, F16 (half the bytes; values
// are rounded to nearest, ties to even, as they are written) or Q8_0
// (34 bytes per 32 values: each group of 32 values of a row is stored as
// ggml's block_q8_0, an F16 scale d and 32 int8 quants q, quantized as
// quantize_q8_0 does (quant.hpp) as it is written, and read as d * q).
enum class KvElement : std::uint8_t { f32, f16, q8_0 };
inline constexpr int kKvElements = 3;
inline constexpr int kKvGroup = 32;               // values per Q8_0 group
inline constexpr std::size_t kKvGroupBytes = 34;  // its F16 scale and 32 quants
// The bytes of `values` values of a row (Q8_0: whole groups of kKvGroup).
inline constexpr std::size_t kv_bytes(KvElement e, std::size_t values) {
  if (e == KvElement::q8_0) return values / kKvGroup * kKvGroupBytes;
  return values * (e == KvElement::f32 ? 4 : 2);
}

// Rows of a paged cache, one per position, from one KV head's keys (or
// values): position p lies in block p >> block_shift, row p & (block
// size - 1) of it, at blocks[block] + offset + row * stride bytes.
struct KvRows {
  const std::byte* const* blocks = nullptr;
  std::size_t offset = 0;  // bytes from a block's start to this head's first element at its first row
  std::size_t stride = 0;  // bytes between rows of a block
  int block_shift = 0;
  // Q8_0 only: a head need not begin a group of 32, so `offset` points at
  // the group it begins in and `lead` of that group's values precede it.
  int lead = 0;
  const std::byte* row(int p) const {
    const auto in_block = static_cast<std::size_t>(p & ((1 << block_shift) - 1));
    return blocks[p >> block_shift] + offset + in_block * stride;
  }
};

// One unit's keys and values in a paged cache (runtime/model/kv_cache.hpp):
// a block holds 1 << block_shift positions; the unit's keys at those
// positions, (positions, kv_dim), start key_offset bytes into each block,
// its values value_offset bytes.
struct KvView {
  const std::byte* const* blocks = nullptr;
  std::size_t key_offset = 0;
  std::size_t value_offset = 0;
  int block_shift = 0;
  int kv_dim = 0;
  KvElement element = KvElement::f32;
};

// Attention's two products over a head's rows [first, first + count):
// out[i] = dot(row(first + i), x) over n values (F32's canonical order,
// kernel_table.hpp; F16 and Q8_0 values converted exactly first), and
// y[j] = fma(weights[i], row(first + i)[j], y[j]) in order of i, added to
// what y holds. Neither result depends on how the rows are split in blocks.
void kv_dots(KvElement element, const KvRows& keys, int first, int count, const float* x, int n, float* out);
void kv_weighted_sum(KvElement element, const float* weights, const KvRows& values, int first, int count, int n,
                     float* y);

// Causal grouped-query attention for a batch of tokens whose keys and values
// are already in the cache. Token t sits at position first_pos + t and
// attends to positions 0..first_pos + t.
// q: (batch, n_heads * head_size)  out: (batch, n_heads * head_size)
// Query head h reads key/value head h / (n_heads / n_kv_heads). The
// softmax of the scores takes silu_mul's exponential.
void attention(ThreadPool& pool, float* out, const float* q, KvView kv, int batch, int first_pos, int n_heads,
               int n_kv_heads, int head_size);

// The heads of attention and how the scores are formed.
struct AttentionHeads {
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_size = 0;
  float score_divisor = 1.0f;  // scores are divided by it (the overload above: sqrt(head_size))
  int window = 0;              // > 0: a token at p attends to positions p - window + 1 .. p only
  // ggml's arithmetic (llama.cpp's CPU backend with AVX512, an F32 cache
  // and flash attention off) in place of accord's kernels: scores as
  // ggml_vec_dot_f32, times 1 / score_divisor; the softmax's e^x as
  // ggml_v_expf, summed per 16 KV cells (cells padded to 256) in double;
  // the weighted sum of values as ggml_vec_dot_f32 computes it for one
  // token, whatever the batch.
  bool ggml = false;
};

// attention() with the heads' options.
void attention(ThreadPool& pool, float* out, const float* q, KvView kv, int batch, int first_pos,
               const AttentionHeads& heads);

}  // namespace accord::cpu
