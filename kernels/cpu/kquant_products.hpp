// The products of K-quant weights (Q2_K .. Q6_K) and IQ4_XS with Q8_K activations,
// written once over a path's vector type V (matmul_tiles.hpp), in the
// order kernel_table.hpp defines. Internal to kernels/cpu.
//
// V provides super_block_sum(q, scale, x): the exact sum over the 16
// groups g of scale[g] * sum of q[i] * x[i] for i in g, with q (256) int8
// of magnitude at most 127 (IQ4_XS; the K-quants' at most 32), scale (16)
// int16 of magnitude at most 128 and x (256) int8 of magnitude at most 127; and group_sum(a, b), the exact sum of a[g]
// * b[g] over 16 int16 (the minimums' part: min against the sums of 16 quants). Each path computes them with its own
// instructions; integers are exact, so every path gives the same bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/kquant_blocks.hpp"

namespace accord::cpu::tiles {

// Tokens whose partial sums a row keeps while its super-blocks pass: each
// super-block is unpacked once per row and group of tokens.
inline constexpr int kKquantTokens = 64;

// A row's super-block unpacked once (kq::SuperBlock) for all the tokens
// it meets: against(x, sums) gives S_b and M_b (kernel_table.hpp) for a
// token's 256 quants x and its sums of 16, sums.
template <class V, class Format>
struct Unpacked {
  kq::SuperBlock u;

  explicit Unpacked(const std::byte* block) { Format::unpack(block, u); }
  float d() const { return u.d; }
  float dmin() const { return u.dmin; }
  kq::SuperBlockInts against(const std::int8_t* x, const std::int16_t* sums) const {
    kq::SuperBlockInts ints{V::super_block_sum(u.q, u.scale, x), 0};
    if constexpr (Format::kMins) ints.mins = V::group_sum(u.min, sums);
    return ints;
  }
};

// How a path reads a super-block of Format: unpacked, unless the path
// multiplies that format's packed values directly (V::Q4KBlock,
// V::Q5KBlock, V::Q6KBlock: the values as stored, as ggml's
// vec_dot_q*_K_q8_K read them).
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

// Row r of w against tokens [tok0, tok0 + count): out[t][r].
template <class V, class Format>
void kquant_row(const Matrix& w, const Activations& x, float* out, int r, int tok0, int count) {
  const int blocks = w.cols / kq::kValues;
  const std::byte* row = w.data + static_cast<std::size_t>(r) * blocks * Format::kBlockBytes;
  float acc[kKquantTokens] = {};
  for (int b = 0; b < blocks; ++b) {
    const typename BlockReader<V, Format>::type block(row + static_cast<std::size_t>(b) * Format::kBlockBytes);
    for (int t = 0; t < count; ++t) {
      const auto token = static_cast<std::size_t>(tok0 + t);
      const std::size_t at = token * static_cast<std::size_t>(w.cols) + static_cast<std::size_t>(b) * kq::kValues;
      const float d_x = x.k_scales[token * static_cast<std::size_t>(blocks) + static_cast<std::size_t>(b)];
      const kq::SuperBlockInts ints = block.against(x.k_quants + at, x.k_sums + at / 16);
      acc[t] = __builtin_fmaf(block.d() * d_x, static_cast<float>(ints.sum), acc[t]);
      if constexpr (Format::kMins)
        acc[t] = __builtin_fmaf(-(block.dmin() * d_x), static_cast<float>(ints.mins), acc[t]);
    }
  }
  for (int t = 0; t < count; ++t) out[static_cast<std::size_t>(tok0 + t) * w.rows + r] = acc[t];
}

template <class V, class Format>
void kquant_rows(const Matrix& w, const Activations& x, float* out, int row_begin, int row_end) {
  for (int t = 0; t < x.batch; t += kKquantTokens) {
    const int count = x.batch - t < kKquantTokens ? x.batch - t : kKquantTokens;
    for (int r = row_begin; r < row_end; ++r) kquant_row<V, Format>(w, x, out, r, t, count);
  }
}

}  // namespace accord::cpu::tiles
