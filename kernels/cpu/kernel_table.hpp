// The CPU kernels of one instruction-set path (isa.hpp), and the one order
// of arithmetic they all follow. Internal to kernels/cpu.
//
// The canonical order, which every path reproduces bit for bit:
//
// - F32 and F16 weights, dot(w, x) over n values: 16 lanes; element i < n16
//   (n rounded down to 16) goes to lane i mod 16 as acc = fma(w_i, x_i, acc).
//   The lanes combine in a fixed tree, lane i with lane i + 8, then i + 4,
//   i + 2, i + 1. The elements from n16 on follow in order, s = fma(w, x, s).
//   F16 values are converted to float exactly first.
// - Q8_0 and Q4_0 weights meet activations quantized per block of 32
//   (quantize_activations): 8 bits, scale amax / 127, round half away from
//   zero. In block b, partial k (0..7) is the exact integer sum of
//   w_j * x_j over j = 4k .. 4k + 3; its lane is (b mod 2) * 8 + k and
//   acc = fma(d_w * d_x, float(partial), acc), the scale product rounded to
//   float first. The 16 lanes combine in the same tree. (An odd last block
//   leaves lanes 8..15 an fma of zeros. A Q4_0 partial is computed from
//   the stored nibbles, v + 8, as sum (v + 8) x - 8 sum x: the same
//   integer.) Q5_0 (v in -16..15) and IQ4_NL (v one of IQ4_XS's 16
//   levels, -127..113) take exactly this order, their w_j being the
//   integers v: the activations are ggml's Q8_0 for them too.
// - Q4_1 and Q5_1 weights (a value is d_w * q + m_w, q unsigned: 0..15,
//   0..31) meet the same 8-bit activations with, per block, ggml's Q8_1 sum
//   s_x = d_x * float(sum of the block's 32 quants). The partials are
//   Q8_0's over q, with the same fma; then, after each pair of blocks'
//   partials, every lane takes acc = fma(m_w, s_lane, acc), where s_lane is
//   s_x of block b in lane (b mod 2) * 8 and 0 in the others (an fma with
//   0 leaves acc as it was). The 16 lanes combine in the same tree.
// - BF16 weights meet the activations rounded to BF16
//   (Activations::bf16_values) as llama.cpp's AVX512-BF16 kernel for one
//   token does (ggml_vec_dot_bf16): per 32 values 16 lanes, lane j taking
//   the product of value 2j + 1, then of 2j, each an fma (VDPBF16PS; its
//   flushing of subnormals aside); per 64 values two such sets of lanes,
//   each reduced as _mm512_reduce_add_ps (lanes i + 8, then i + 4, then
//   (0 + 2) + (1 + 3)), their sum and any values past the last 64 in
//   double, rounded to float.
// - K-quant weights (Q2_K .. Q6_K, super-blocks of 256) and IQ4_XS (16
//   non-linear levels per 32 values, a 6-bit scale) meet activations in
//   ggml's Q8_K (quantize_q8_k: per 256 values, scale d_x, int8 quants,
//   sums of 16) and follow, bit for bit, the kernels llama.cpp's CPU
//   backend runs for one token on x86 with AVX512 (the zoo's reference,
//   docs/models.md). Integers are exact; with scale_g, min_g the 16-value
//   groups' scale and minimum, d, dmin the super-block's and M = sum over
//   g of min_g * (sum of g's 16 x), the float steps are, per row and
//   token, from 0:
//   * Q4_K and Q2_K (ggml repacks them in rows of eight; its gemv): per
//     super-block s = fma(float(S), d * d_x, s) and
//     m = fma(float(M), dmin * d_x, m), S = sum of scale_g * q_i * x_i;
//     the result s - m.
//   * Q3_K, Q5_K, Q6_K and IQ4_XS (vec_dot_*_q8_K, AVX2): eight lanes,
//     lane k holding values 32c + 4k .. 32c + 4k + 3 of each chunk c of
//     32; per super-block lane_k = fma(d_x * d, float(L_k), lane_k), L_k
//     the lane's sum of scale_g * q_i * x_i (Q6_K: its values stored as
//     v + 32, less 32 * (scale_g * sum of g's x) of groups 2k and 2k + 1);
//     then ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), and for Q5_K
//     plus mins = fma(-(d_x * dmin), float(M), mins) kept apart.
//   (The integers stay below 2^31: at most 256 * 127 * 127 * 128.)
//   llama.cpp itself takes other kernels for a batch (gemm, tinyBLAS), so
//   its bits depend on a token's place in a batch; accord's never do:
//   every token of any batch takes the one-token kernels (DESIGN.md,
//   "Kernels"; docs/models.md says what that costs against the zoo).
//
// Attention's weighted sum of values adds each position in order with an
// fma per element, from 0 (kv_weighted_sum); F16 keys and values are
// converted exactly first, as F16 weights are.
//
// Threads split output rows and batches split tokens, never a reduction,
// so results depend neither on the pool size nor on the batch size.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matrix.hpp"
#include "kernels/cpu/ops.hpp"

namespace accord::cpu {

inline constexpr int kLanes = 16;
inline constexpr int kBlock = 32;  // values per Q8_0, Q4_0, ... block

// Blocks of 32 per pair of scales in Activations::scale_lanes.
// Static: internal to each path's translation unit (matmul_tiles.hpp).
static constexpr int block_pairs(int cols) { return (cols / kBlock + 1) / 2; }

// A batch of input rows, with their 8-bit form when the weights are quantized.
struct Activations {
  const float* values = nullptr;  // (batch, cols)
  // The values rounded to BF16 (to nearest, ties to even), which BF16
  // weights meet, as llama.cpp's do (their vec_dot_type is BF16):
  // (batch, cols); BF16 only.
  const float* bf16_values = nullptr;
  const std::int8_t* quants = nullptr;  // (batch, cols), block formats only
  // The quants' scales laid out as the lanes they multiply: per token and
  // pair of blocks (b, b + 1), 8 lanes of b's scale then 8 of b + 1's
  // (0 past the last block). (batch, block_pairs(cols), 16); block formats only.
  const float* scale_lanes = nullptr;
  // For Q4_0, whose values are stored as v + 8 (0..15): -8 times each sum
  // of four activations, in the lanes of the partial sums they correct
  // (per token and pair of blocks, 16 lanes; 0 past the last block).
  // (batch, block_pairs(cols), 16); Q4_0 only.
  const std::int32_t* nibble_offsets = nullptr;
  // For Q8_0, Q5_0 and IQ4_NL (signed values), on a path that takes the
  // weights as unsigned bytes (w + 128, kernels_avx512.cpp): -128 times
  // each sum of four, laid out as nibble_offsets. (batch, block_pairs(cols),
  // 16); those types only.
  const std::int32_t* byte_offsets = nullptr;
  // For Q4_1 and Q5_1, the per-block sums of Q8_1 (kernel order above) in
  // the lanes of the minimums they meet: per token and pair of blocks
  // (b, b + 1), s of b in lane 0, s of b + 1 in lane 8, 0 elsewhere.
  // (batch, block_pairs(cols), 16); Q4_1 and Q5_1 only.
  const float* sum_lanes = nullptr;
  // Q8_K, for K-quant weights: quants (batch, cols), a scale per 256
  // (batch, cols / 256) and the sums of each 16 quants (batch, cols / 16).
  const std::int8_t* k_quants = nullptr;
  const float* k_scales = nullptr;
  const std::int16_t* k_sums = nullptr;
  int batch = 0;
  int cols = 0;
};

// out[t][r] = dot(w[r], x[t]) for rows [row_begin, row_end) and every token.
// out: (batch, w.rows)
using MatmulRows = void (*)(const Matrix& w, const Activations& x, float* out, int row_begin, int row_end);

// One query head's attention in ggml's arithmetic (attention_ggml.hpp):
// positions start .. pos of its KV head's keys and values.
struct GgmlHead {
  const float* q = nullptr;  // (head_size)
  KvRows keys;
  KvRows values;
  int head_size = 0;
  int start = 0;
  int pos = 0;
  float scale = 1.0f;       // of the scores
  float* scores = nullptr;  // (pos + 1) scratch
  float* out = nullptr;     // (head_size)
};

struct KernelTable {
  MatmulRows by_type[kWeightTypes];  // indexed by WeightType
  float (*dot)(const float* a, const float* b, int n);
  // kv_dots and kv_weighted_sum (ops.hpp), indexed by KvElement.
  void (*kv_dots[kKvElements])(const KvRows& keys, int first, int count, const float* x, int n, float* out);
  void (*kv_weighted_sum[kKvElements])(const float* weights, const KvRows& values, int first, int count, int n,
                                       float* y);
  // quantize_activations (matmul.hpp).
  void (*quantize)(const float* x, int n, std::int8_t* quants, float* scales);
  // silu_mul (ops.hpp).
  void (*silu_mul)(float* gate, const float* up, int n);
  // silu_mul_ggml (ops.hpp).
  void (*silu_mul_ggml)(float* gate, const float* up, int n);
  // Attention's weights: scores / scale, then their softmax (vector_math.hpp).
  void (*attention_weights)(float* scores, int n, float scale);
  void (*attend_ggml[kKvElements])(const GgmlHead& head);  // indexed by KvElement
};

const KernelTable& portable_kernels();
// Null where the compiler could not build the path (not x86-64).
const KernelTable* avx2_kernels();
const KernelTable* avx512_kernels();

}  // namespace accord::cpu

namespace accord::cpu {

// The table of active_isa() (isa.hpp).
const KernelTable& active_kernels();

}  // namespace accord::cpu
