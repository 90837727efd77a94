// The products of Q4_1, Q5_0, Q5_1 and IQ4_NL weights (ggml's other blocks
// of 32 values) with the activations' 8-bit blocks, written once over a
// path's vector type V (matmul_tiles.hpp), in the order kernel_table.hpp
// defines: Q8_0's lanes of exact sums of four products, from the values
// each block unpacks to. Internal to kernels/cpu.
//
// V's operations are Q8_0's and Q4_0's: quants, quant_pair, nibbles,
// weight_side, load_offsets, partials (signed values: Q5_0's v - 16,
// IQ4_NL's levels, with the token's byte offsets), nibble_partials (unsigned ones: Q4_1's and Q5_1's
// stored levels, from zero offsets), half_pair, mul, fma, load, reduce.
// Integers are exact, so every path gives the same bits.
//
// Static helpers: each path keeps its own copy, built for its instruction
// set (matmul_tiles.hpp says why that matters).
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/kquant_blocks.hpp"
#include "kernels/cpu/quant.hpp"

namespace accord::cpu::tiles {

// A Q5 block's 32 levels less `offset` (16 for Q5_0, 0 for Q5_1): value j
// takes its low four bits from qs (j < 16 low nibbles, then high ones) and
// its fifth from bit j of qh (four bytes, little-endian).
static inline void five_bit_levels(const std::uint8_t* qh, const std::uint8_t* qs, int offset, std::int8_t* q) {
  const std::uint32_t bits = qh[0] | qh[1] << 8 | qh[2] << 16 | static_cast<std::uint32_t>(qh[3]) << 24;
#if defined(__AVX2__)
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m256i low4 = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(packed, 4), mask), _mm_and_si128(packed, mask));
  // Byte j of bytes_of_qh is byte j / 8 of qh; it is all ones where bit j % 8 is set.
  const __m256i bytes_of_qh = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  const __m256i bit = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(bytes_of_qh, bit), _mm256_set1_epi64x(-1));
  const __m256i levels = _mm256_or_si256(low4, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_sub_epi8(levels, _mm256_set1_epi8(static_cast<char>(offset))));
#else
  for (int j = 0; j < 16; ++j) {
    q[j] = static_cast<std::int8_t>(((qs[j] & 0xF) | (bits >> j & 1) << 4) - offset);
    q[j + 16] = static_cast<std::int8_t>(((qs[j] >> 4) | (bits >> (j + 16) & 1) << 4) - offset);
  }
#endif
}

#if defined(__AVX512BW__)
// The AVX-512 path's Quants of two Q5 blocks (b1 null: zeros) from their
// nibbles as V::nibbles gives them (byte 32 b + j is value j of block b):
// the fifth bits through one byte mask, bit j of block b's qh for byte
// 32 b + j, then the offset taken from the blocks that exist.
static inline __m512i five_bit_pair(__m512i nibbles, const std::byte* b0, const std::byte* b1, std::size_t qh_at,
                                    int offset) {
  const auto qh = [&](const std::byte* block) {
    std::uint32_t bits;
    __builtin_memcpy(&bits, block + qh_at, sizeof bits);
    return static_cast<std::uint64_t>(bits);
  };
  const std::uint64_t fifth = qh(b0) | (b1 != nullptr ? qh(b1) << 32 : 0);
  const __m512i levels = _mm512_or_si512(nibbles, _mm512_maskz_mov_epi8(fifth, _mm512_set1_epi8(0x10)));
  const __mmask64 present = b1 != nullptr ? ~0ull : 0xFFFFFFFFull;
  return _mm512_maskz_sub_epi8(present, levels, _mm512_set1_epi8(static_cast<char>(offset)));
}
#endif

// Unnamed: the formats' functions differ per path (five_bit_levels,
// iq4_levels), so each path's translation unit must keep its own.
namespace {

// How each type's block reads. kMin: the block carries a minimum m (a value
// is d * q + m) at byte 2, and its levels are unsigned; else they are signed.
// levels(block, q): the 32 levels as int8. The scale d is at byte 0.
struct Q4_1Blocks {
  static constexpr std::size_t kBlockBytes = kQ4_1BlockBytes;
  static constexpr bool kMin = true;
  static constexpr bool kNibbles = true;  // V::nibbles reads the levels as stored
  static constexpr std::size_t kNibblesAt = 4;
};
// Q5_0 and Q5_1: the fifth bits (qh) at QhAt, the nibbles (qs) at QsAt,
// levels less Offset.
template <std::size_t Bytes, bool Min, int Offset, std::size_t QhAt, std::size_t QsAt>
struct FiveBitBlocks {
  static constexpr std::size_t kBlockBytes = Bytes;
  static constexpr bool kMin = Min;
  static constexpr bool kNibbles = false;
  static constexpr int kFiveBitOffset = Offset;
  static constexpr std::size_t kQhAt = QhAt, kQsAt = QsAt;
  static void levels(const std::byte* block, std::int8_t* q) {
    five_bit_levels(kq::bytes_of(block) + QhAt, kq::bytes_of(block) + QsAt, Offset, q);
  }
};
using Q5_1Blocks = FiveBitBlocks<kQ5_1BlockBytes, true, 0, 4, 8>;
using Q5_0Blocks = FiveBitBlocks<kQ5_0BlockBytes, false, 16, 2, 6>;
struct IQ4_NLBlocks {
  static constexpr std::size_t kBlockBytes = kIQ4_NLBlockBytes;
  static constexpr bool kMin = false;
  static constexpr bool kNibbles = false;
  static void levels(const std::byte* block, std::int8_t* q) { kq::iq4_levels(kq::bytes_of(block) + 2, q); }
};

}  // namespace

// Blocks b0 and b1 (null: zeros) of a row as V::Quants.
template <class V, class Format>
typename V::Quants weight_quants(const std::byte* b0, const std::byte* b1) {
  if constexpr (Format::kNibbles) {
    return V::nibbles(b0 + Format::kNibblesAt, b1 != nullptr ? b1 + Format::kNibblesAt : nullptr);
#if defined(__AVX512BW__)
  } else if constexpr (requires { Format::kFiveBitOffset; }) {
    const auto nibbles = V::nibbles(b0 + Format::kQsAt, b1 != nullptr ? b1 + Format::kQsAt : nullptr);
    return five_bit_pair(nibbles, b0, b1, Format::kQhAt, Format::kFiveBitOffset);
#endif
  } else {
    alignas(32) std::int8_t q[2][kBlock];
    Format::levels(b0, q[0]);
    if (b1 != nullptr) Format::levels(b1, q[1]);
    return V::quants(q[0], b1 != nullptr ? q[1] : nullptr);
  }
}

// The two f16 fields at byte `at` of blocks b0 and b1 (null: 0) as pair() lanes.
template <class V>
typename V::Vec halves_at(const std::byte* b0, const std::byte* b1, std::size_t at) {
  std::uint16_t h0, h1 = 0;
  __builtin_memcpy(&h0, b0 + at, sizeof h0);
  if (b1 != nullptr) __builtin_memcpy(&h1, b1 + at, sizeof h1);
  return V::half_pair(h0, h1);
}

// Where a token's 8-bit form lies (Activations), from block 0.
struct TokenBlocks {
  const std::int8_t* quants;
  const float* scale_lanes;
  const float* sum_lanes;            // Q4_1 and Q5_1 only
  const std::int32_t* byte_offsets;  // Q5_0 and IQ4_NL only
};

// Blocks b and, when Pair, b + 1 of R rows against T tokens, into acc.
// Each row's weights are prepared once for the T tokens, each token's
// activations once for the R rows.
template <class V, class Format, int R, int T, bool Pair>
void legacy_step(const std::byte* const (&rows)[R], const TokenBlocks (&x)[T], int b, typename V::Vec (&acc)[R][T]) {
  using Vec = typename V::Vec;
  const std::size_t lanes_at = static_cast<std::size_t>(b / 2) * kLanes;
  Vec wd[R];
  typename V::Quants wq[R];
  for (int r = 0; r < R; ++r) {
    const std::byte* b0 = rows[r] + static_cast<std::size_t>(b) * Format::kBlockBytes;
    const std::byte* b1 = Pair ? b0 + Format::kBlockBytes : nullptr;
    wd[r] = halves_at<V>(b0, b1, 0);
    wq[r] = weight_quants<V, Format>(b0, b1);
  }
  for (int t = 0; t < T; ++t) {
    const std::int8_t* q = x[t].quants + static_cast<std::size_t>(b) * kBlock;
    const typename V::Quants xq = Pair ? V::quant_pair(q) : V::quants(q, nullptr);
    const Vec xd = V::load(reinterpret_cast<const std::byte*>(x[t].scale_lanes + lanes_at));
    if constexpr (Format::kMin) {
      static constexpr std::int32_t kNoOffsets[kLanes] = {};
      const typename V::Offsets none = V::load_offsets(kNoOffsets);
      const Vec sums = V::load(reinterpret_cast<const std::byte*>(x[t].sum_lanes + lanes_at));
      for (int r = 0; r < R; ++r) {
        const std::byte* b0 = rows[r] + static_cast<std::size_t>(b) * Format::kBlockBytes;
        acc[r][t] = V::fma(V::mul(wd[r], xd), V::nibble_partials(wq[r], xq, none), acc[r][t]);
        acc[r][t] = V::fma(halves_at<V>(b0, Pair ? b0 + Format::kBlockBytes : nullptr, 2), sums, acc[r][t]);
      }
    } else {
      const typename V::Offsets xo = V::load_offsets(x[t].byte_offsets + lanes_at);
      for (int r = 0; r < R; ++r) {
        acc[r][t] = V::fma(V::mul(wd[r], xd), V::partials(V::weight_side(wq[r]), xq, xo), acc[r][t]);
      }
    }
  }
}

// Rows [row0, row0 + R) of w against tokens [tok0, tok0 + T): out[t][r].
template <class V, class Format, int R, int T>
void legacy_tile(const Matrix& w, const Activations& x, float* out, int row0, int tok0) {
  const int blocks = w.cols / kBlock;
  const std::byte* rows[R];
  for (int r = 0; r < R; ++r) {
    rows[r] = w.data + static_cast<std::size_t>(row0 + r) * blocks * Format::kBlockBytes;
  }
  TokenBlocks tokens[T];
  typename V::Vec acc[R][T];
  for (int t = 0; t < T; ++t) {
    const auto token = static_cast<std::size_t>(tok0 + t);
    const std::size_t lanes = token * static_cast<std::size_t>(block_pairs(w.cols)) * kLanes;
    tokens[t] = {x.quants + token * static_cast<std::size_t>(w.cols), x.scale_lanes + lanes,
                 Format::kMin ? x.sum_lanes + lanes : nullptr, Format::kMin ? nullptr : x.byte_offsets + lanes};
    for (int r = 0; r < R; ++r) acc[r][t] = V::zero();
  }
  int b = 0;
  for (; b + 2 <= blocks; b += 2) legacy_step<V, Format, R, T, true>(rows, tokens, b, acc);
  if (b < blocks) legacy_step<V, Format, R, T, false>(rows, tokens, b, acc);
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < R; ++r) out[static_cast<std::size_t>(tok0 + t) * w.rows + row0 + r] = V::reduce(acc[r][t]);
  }
}

// Tokens [tok_begin, tok_end) for rows [row_begin, row_end): tiles of R
// rows and T tokens, then what is left one row or token at a time.
template <class V, class Format, int R, int T>
void legacy_tiles(const Matrix& w, const Activations& x, float* out, int row_begin, int row_end, int tok_begin,
                  int tok_end) {
  int r = row_begin;
  for (; r + R <= row_end; r += R) {
    int t = tok_begin;
    for (; t + T <= tok_end; t += T) legacy_tile<V, Format, R, T>(w, x, out, r, t);
    for (; t < tok_end; ++t) legacy_tile<V, Format, R, 1>(w, x, out, r, t);
  }
  for (; r < row_end; ++r) {
    for (int t = tok_begin; t < tok_end; ++t) legacy_tile<V, Format, 1, 1>(w, x, out, r, t);
  }
}

// Tokens whose activations stay in cache while the rows pass over them.
inline constexpr int kLegacyTokensPerPass = 64;

// A decode step's tokens one row at a time (memory-bound: one stream of
// weights); batches in the path's register tiles (V::kRows x V::kTokens).
template <class V, class Format>
void legacy_rows(const Matrix& w, const Activations& x, float* out, int row_begin, int row_end) {
  if (x.batch < V::kTokens) {
    legacy_tiles<V, Format, 1, 1>(w, x, out, row_begin, row_end, 0, x.batch);
    return;
  }
  for (int pass = 0; pass < x.batch; pass += kLegacyTokensPerPass) {
    const int end = pass + kLegacyTokensPerPass < x.batch ? pass + kLegacyTokensPerPass : x.batch;
    legacy_tiles<V, Format, V::kRows, V::kTokens>(w, x, out, row_begin, row_end, pass, end);
  }
}

}  // namespace accord::cpu::tiles
