// The products of K-quant weights (Q2_K .. Q6_K) and IQ4_XS with Q8_K activations,
// written once over a path's vector type V (matmul_tiles.hpp), in the
// orders kernel_table.hpp defines. Internal to kernels/cpu.
//
// V provides super_block_lanes(q, scale, x, c0, c1, lanes): for the values
// of the 32-value chunks c0 .. c1 - 1 of a super-block, the exact sums of
// scale[i / 16] * q[i] * x[i] in eight lanes, lane k taking values
// 32c + 4k .. 32c + 4k + 3 (ggml's AVX2 layout), with q (256) int8 of
// magnitude at most 127 (IQ4_XS; the K-quants' at most 63), scale (16)
// int16 of magnitude at most 128 and x (256) int8 of magnitude at most
// 127; and group_sum(a, b), the exact sum of a[g] * b[g] over 16 int16
// (the minimums' part: min against the sums of 16 quants). Each path
// computes them with its own instructions; integers are exact, so every
// path gives the same bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/kquant_blocks.hpp"

namespace accord::cpu::tiles {

// Tokens whose partial sums a row keeps while its super-blocks pass: each
// super-block is unpacked once per row and group of tokens.
inline constexpr int kKquantTokens = 64;

// One row's running sums for one token: eight lanes and the minimums'
// part (Order::lanes), or lane 0 and the minimums (Order::repacked).
struct KquantSums {
  float lane[8] = {};
  float mins = 0.0f;
};

// The operands of one super-block against one token.
struct KquantBlock {
  const kq::SuperBlock* u;
  const std::int8_t* x;      // 256 Q8_K quants
  const std::int16_t* sums;  // their 16 sums of 16
  float d_x;
};

template <class V>
struct KquantOrders {
  // ggml's vec_dot_*_q8_K (AVX2): per super-block eight lane integers, each
  // lane += (d_x * d) * lane; Q5_K's minimums apart, as one fma per block.
  static void add_lanes(const KquantBlock& b, bool q6_offset, bool mins, KquantSums& s) {
    std::int32_t lanes[8];
    V::super_block_lanes(b.u->q, b.u->scale, b.x, 0, 8, lanes);
    if (q6_offset) add_q6_offset(b, lanes);
    const float d = b.d_x * b.u->d;
    for (int k = 0; k < 8; ++k) s.lane[k] = __builtin_fmaf(d, static_cast<float>(lanes[k]), s.lane[k]);
    if (mins) {
      const std::int32_t m = V::group_sum(b.u->min, b.sums);
      s.mins = __builtin_fmaf(-(b.d_x * b.u->dmin), static_cast<float>(m), s.mins);
    }
  }
  // ggml stores Q6_K's values as v + 32 and takes 32 * scale * (sum of x)
  // of groups 2k and 2k + 1 off lane k: the same total, in other lanes.
  static void add_q6_offset(const KquantBlock& b, std::int32_t* lanes) {
    static constexpr auto kOnes = [] {
      struct Ones {
        std::int8_t v[kq::kValues];
      } ones{};
      for (auto& v : ones.v) v = 1;
      return ones;
    }();
    std::int32_t scaled_x[8];
    V::super_block_lanes(kOnes.v, b.u->scale, b.x, 0, 8, scaled_x);
    for (int k = 0; k < 8; ++k) {
      const std::int32_t groups = b.u->scale[2 * k] * b.sums[2 * k] + b.u->scale[2 * k + 1] * b.sums[2 * k + 1];
      lanes[k] += 32 * (scaled_x[k] - groups);
    }
  }
  static float finish_lanes(const KquantSums& s) {
    const float a = (s.lane[0] + s.lane[4]) + (s.lane[2] + s.lane[6]);
    const float b = (s.lane[1] + s.lane[5]) + (s.lane[3] + s.lane[7]);
    return (a + b) + s.mins;
  }
  // ggml's repacked gemv / gemm (8 rows interleaved): per chunk of `chunk`
  // values one integer of the values and one of the minimums, each into its
  // own sum; the result is their difference.
  static void add_repacked(const KquantBlock& b, int chunk, KquantSums& s) {
    const int chunks_of_32 = chunk / 32;
    for (int c = 0; c < 8; c += chunks_of_32) {
      std::int32_t lanes[8];
      V::super_block_lanes(b.u->q, b.u->scale, b.x, c, c + chunks_of_32, lanes);
      std::int32_t values = 0, mins = 0;
      for (int k = 0; k < 8; ++k) values += lanes[k];
      for (int g = 2 * c; g < 2 * (c + chunks_of_32); ++g) mins += b.u->min[g] * b.sums[g];
      s.lane[0] = __builtin_fmaf(static_cast<float>(values), b.u->d * b.d_x, s.lane[0]);
      s.mins = __builtin_fmaf(static_cast<float>(mins), b.u->dmin * b.d_x, s.mins);
    }
  }
  static float finish_repacked(const KquantSums& s) { return s.lane[0] - s.mins; }
  // ggml's tiled product of a batch of 8 tokens or more: per super-block
  // S * d - dmin * M, then its product with d_x added to one sum (GCC
  // contracts ggml's vector mul and add into an fma).
  static void add_tiled(const KquantBlock& b, bool mins, KquantSums& s) {
    std::int32_t lanes[8];
    V::super_block_lanes(b.u->q, b.u->scale, b.x, 0, 8, lanes);
    std::int32_t values = 0;
    for (int k = 0; k < 8; ++k) values += lanes[k];
    float block = static_cast<float>(values) * b.u->d;
    if (mins) block = __builtin_fmaf(-b.u->dmin, static_cast<float>(V::group_sum(b.u->min, b.sums)), block);
    s.lane[0] = __builtin_fmaf(block, b.d_x, s.lane[0]);
  }
};

// Which of ggml's kernels a token's product follows (kernel_table.hpp).
enum class KquantKernel { lanes, tiled, gemv, gemm };

template <class Format>
KquantKernel kquant_kernel(int token, int batch) {
  if constexpr (Format::kOrder == kq::Order::repacked) {
    return batch > 3 && token < batch - batch % 4 ? KquantKernel::gemm : KquantKernel::gemv;
  } else {
    return batch >= 8 ? KquantKernel::tiled : KquantKernel::lanes;
  }
}

// Row r of w against tokens [tok0, tok0 + count): out[t][r].
template <class V, class Format>
void kquant_row(const Matrix& w, const Activations& x, float* out, int r, int tok0, int count) {
  using Orders = KquantOrders<V>;
  const int blocks = w.cols / kq::kValues;
  const std::byte* row = w.data + static_cast<std::size_t>(r) * blocks * Format::kBlockBytes;
  KquantSums sums[kKquantTokens];
  kq::SuperBlock u;
  for (int b = 0; b < blocks; ++b) {
    Format::unpack(row + static_cast<std::size_t>(b) * Format::kBlockBytes, u);
    for (int t = 0; t < count; ++t) {
      const auto token = static_cast<std::size_t>(tok0 + t);
      const std::size_t at = token * static_cast<std::size_t>(w.cols) + static_cast<std::size_t>(b) * kq::kValues;
      const KquantBlock block{&u, x.k_quants + at, x.k_sums + at / 16,
                              x.k_scales[token * static_cast<std::size_t>(blocks) + static_cast<std::size_t>(b)]};
      switch (kquant_kernel<Format>(tok0 + t, x.batch)) {
        case KquantKernel::lanes: Orders::add_lanes(block, Format::kQ6Offset, Format::kMins, sums[t]); break;
        case KquantKernel::tiled: Orders::add_tiled(block, Format::kMins, sums[t]); break;
        case KquantKernel::gemv: Orders::add_repacked(block, kq::kValues, sums[t]); break;
        case KquantKernel::gemm: Orders::add_repacked(block, Format::kGemmChunk, sums[t]); break;
      }
    }
  }
  for (int t = 0; t < count; ++t) {
    const KquantKernel kernel = kquant_kernel<Format>(tok0 + t, x.batch);
    const float value = kernel == KquantKernel::lanes   ? Orders::finish_lanes(sums[t])
                        : kernel == KquantKernel::tiled ? sums[t].lane[0]
                                                        : Orders::finish_repacked(sums[t]);
    out[static_cast<std::size_t>(tok0 + t) * w.rows + r] = value;
  }
}

template <class V, class Format>
void kquant_rows(const Matrix& w, const Activations& x, float* out, int row_begin, int row_end) {
  for (int t = 0; t < x.batch; t += kKquantTokens) {
    const int count = x.batch - t < kKquantTokens ? x.batch - t : kKquantTokens;
    for (int r = row_begin; r < row_end; ++r) kquant_row<V, Format>(w, x, out, r, t, count);
  }
}

}  // namespace accord::cpu::tiles
