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

// One row's running sums for one token: ggml's eight lanes and the
// minimums' part (Order::lanes), or the values' sum in lane 0 and the
// minimums' (Order::repacked). No initializers: a row zeroes the sums of
// the tokens it has, not all kKquantTokens (2.3 KB a row, four times a
// decode row's Q4_K bytes at 1024 columns).
struct KquantSums {
  float lane[8];
  float mins;
};

// A row's super-block unpacked once (kq::SuperBlock) for all the tokens it
// meets. A block reader gives d(), dmin(), lanes(x, sums, out): ggml's
// eight lane integers of the block against a token's 256 quants x and
// their sums of 16 (super_block_lanes; Q6_K's with ggml's offsets), and
// mins(sums): M_b, 0 without minimums.
template <class V, class Format>
struct Unpacked {
  kq::SuperBlock u;

  explicit Unpacked(const std::byte* block) { Format::unpack(block, u); }
  float d() const { return u.d; }
  float dmin() const { return u.dmin; }
  void lanes(const std::int8_t* x, const std::int16_t* sums, std::int32_t* out) const {
    V::super_block_lanes(u.q, u.scale, x, 0, 8, out);
    if constexpr (Format::kQ6Offset) add_q6_offset(x, sums, out);
  }
  std::int32_t mins(const std::int16_t* sums) const {
    if constexpr (Format::kMins) return V::group_sum(u.min, sums);
    return 0;
  }
  // ggml stores Q6_K's values as v + 32 and takes 32 * scale * (sum of x)
  // of groups 2k and 2k + 1 off lane k: the same total, in other lanes.
  void add_q6_offset(const std::int8_t* x, const std::int16_t* sums, std::int32_t* lanes) const {
    static constexpr auto kOnes = [] {
      struct Ones {
        std::int8_t v[kq::kValues];
      } ones{};
      for (auto& v : ones.v) v = 1;
      return ones;
    }();
    std::int32_t scaled_x[8];
    V::super_block_lanes(kOnes.v, u.scale, x, 0, 8, scaled_x);
    for (int k = 0; k < 8; ++k) {
      const std::int32_t groups = u.scale[2 * k] * sums[2 * k] + u.scale[2 * k + 1] * sums[2 * k + 1];
      lanes[k] += 32 * (scaled_x[k] - groups);
    }
  }
};

// How a path reads a super-block of Format: unpacked, unless the path
// multiplies that format's packed values directly (V::Q4KBlock,
// V::Q5KBlock, V::Q6KBlock: the values as stored, as ggml's
// vec_dot_q*_K_q8_K read them), with the same lanes.
template <class V, class Format>
struct BlockReader {
  using type = Unpacked<V, Format>;
};
template <class V>
requires requires { typename V::Q4KBlock; }
struct BlockReader<V, kq::Q4K> {
  using type = typename V::Q4KBlock;
};
template <class V>
requires requires { typename V::Q5KBlock; }
struct BlockReader<V, kq::Q5K> {
  using type = typename V::Q5KBlock;
};
template <class V>
requires requires { typename V::Q6KBlock; }
struct BlockReader<V, kq::Q6K> {
  using type = typename V::Q6KBlock;
};

// One super-block of a row against one token, in Format's order
// (kernel_table.hpp): ggml's repacked gemv, one integer of the values and
// one of the minimums each into its own sum; or vec_dot's eight lanes,
// each += (d_x * d) * lane, the minimums apart.
template <class Format, class Block>
void add_block(const Block& block, const std::int8_t* x, const std::int16_t* sums, float d_x, KquantSums& s) {
  std::int32_t lanes[8];
  block.lanes(x, sums, lanes);
  if constexpr (Format::kOrder == kq::Order::repacked) {
    std::int32_t values = 0;
    for (const std::int32_t lane : lanes) values += lane;
    s.lane[0] = __builtin_fmaf(static_cast<float>(values), block.d() * d_x, s.lane[0]);
    s.mins = __builtin_fmaf(static_cast<float>(block.mins(sums)), block.dmin() * d_x, s.mins);
  } else {
    const float scale = d_x * block.d();
    for (int k = 0; k < 8; ++k) s.lane[k] = __builtin_fmaf(scale, static_cast<float>(lanes[k]), s.lane[k]);
    if constexpr (Format::kMins) {
      s.mins = __builtin_fmaf(-(d_x * block.dmin()), static_cast<float>(block.mins(sums)), s.mins);
    }
  }
}

template <class Format>
float finish(const KquantSums& s) {
  if constexpr (Format::kOrder == kq::Order::repacked) return s.lane[0] - s.mins;
  const float a = (s.lane[0] + s.lane[4]) + (s.lane[2] + s.lane[6]);
  const float b = (s.lane[1] + s.lane[5]) + (s.lane[3] + s.lane[7]);
  return (a + b) + s.mins;
}

// Row r of w against tokens [tok0, tok0 + count): out[t][r]. Every token
// takes the kernel ggml runs for a token alone, whatever the batch.
template <class V, class Format>
void kquant_row(const Matrix& w, const Activations& x, float* out, int r, int tok0, int count) {
  const int blocks = w.cols / kq::kValues;
  const std::byte* row = w.data + static_cast<std::size_t>(r) * blocks * Format::kBlockBytes;
  KquantSums sums[kKquantTokens];
  for (int t = 0; t < count; ++t) sums[t] = {};
  for (int b = 0; b < blocks; ++b) {
    const typename BlockReader<V, Format>::type block(row + static_cast<std::size_t>(b) * Format::kBlockBytes);
    for (int t = 0; t < count; ++t) {
      const auto token = static_cast<std::size_t>(tok0 + t);
      const std::size_t at = token * static_cast<std::size_t>(w.cols) + static_cast<std::size_t>(b) * kq::kValues;
      const float d_x = x.k_scales[token * static_cast<std::size_t>(blocks) + static_cast<std::size_t>(b)];
      add_block<Format>(block, x.k_quants + at, x.k_sums + at / 16, d_x, sums[t]);
    }
  }
  for (int t = 0; t < count; ++t) out[static_cast<std::size_t>(tok0 + t) * w.rows + r] = finish<Format>(sums[t]);
}

template <class V, class Format>
void kquant_rows(const Matrix& w, const Activations& x, float* out, int row_begin, int row_end) {
  for (int t = 0; t < x.batch; t += kKquantTokens) {
    const int count = x.batch - t < kKquantTokens ? x.batch - t : kKquantTokens;
    for (int r = row_begin; r < row_end; ++r) kquant_row<V, Format>(w, x, out, r, t, count);
  }
}

}  // namespace accord::cpu::tiles
