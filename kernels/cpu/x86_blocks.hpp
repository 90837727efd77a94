// Block helpers shared by the two x86 paths (kernels_avx2.cpp and
// kernels_avx512.cpp), which include this header after <immintrin.h> and
// are both compiled with AVX2. Static: each path keeps its own copy, built
// for its own instruction set (matmul_tiles.hpp says why that matters).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/kquant_blocks.hpp"

namespace accord::cpu::x86 {

// A block of 32 int8 values, or zeros where p is null.
static inline __m256i block(const std::int8_t* p) {
  return p != nullptr ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)) : _mm256_setzero_si256();
}

// A Q4_0 block's 16 bytes of nibbles as 32 bytes in 0..15 (the values
// plus 8): the low nibbles are values 0-15, the high ones 16-31. Zeros
// where p is null.
static inline __m256i nibbles(const std::byte* p) {
  if (p == nullptr) return _mm256_setzero_si256();
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i mask = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(packed, 4), mask), _mm_and_si128(packed, mask));
}

// The eight 32-bit lanes of v added.
static inline std::int32_t lane_sum(__m256i v) {
  const __m128i four = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i two = _mm_add_epi32(four, _mm_shuffle_epi32(four, 0x4E));
  return _mm_cvtsi128_si32(_mm_add_epi32(two, _mm_shuffle_epi32(two, 0xB1)));
}

// super_block_lanes of kquant_products.hpp: per 32 values, |q| (unsigned)
// times x with q's sign in pairs (at most 2 * 127 * 127, no saturation),
// the pairs of group 2c (lanes 0-3) and 2c + 1 (lanes 4-7) times their
// scales and added in pairs, into eight 32-bit sums.
static inline void super_block_lanes(const std::int8_t* q, const std::int16_t* scale, const std::int8_t* x, int c0,
                                     int c1, std::int32_t* lanes) {
  __m256i acc = _mm256_setzero_si256();
  for (int c = c0; c < c1; ++c) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * c));
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * c));
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
    const __m256i scales = _mm256_set_m128i(_mm_set1_epi16(scale[2 * c + 1]), _mm_set1_epi16(scale[2 * c]));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, scales));
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), acc);
}

// The sum of a[g] * b[g] over 16 int16, by pairs (exact: here minimums
// below 64 against sums of 16 quants, |sum| <= 16 * 127).
static inline std::int32_t group_sum(const std::int16_t* a, const std::int16_t* b) {
  return lane_sum(_mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)),
                                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b))));
}

// The f16 at p as a float, exactly (F16C; kq::half_at calls the portable
// conversion out of line, once per super-block).
static inline float half_at(const std::byte* p) {
  const std::uint8_t* b = kq::bytes_of(p);
  return _cvtsh_ss(static_cast<unsigned short>(b[0] | b[1] << 8));
}

// Q4_K's and Q5_K's eight 6-bit scales and eight minimums from their 12
// packed bytes (kq::scale_min_k4, four at a time in 32-bit words): bytes
// 0-7 the scales, 8-15 the minimums.
static inline __m128i scales_mins_k4(const std::uint8_t* packed) {
  std::uint32_t w[3];
  std::memcpy(w, packed, sizeof w);
  const std::uint32_t low6 = 0x3F3F3F3Fu, low4 = 0x0F0F0F0Fu, low2 = 0x03030303u;
  const std::uint32_t scales_low = w[0] & low6, mins_low = w[1] & low6;
  const std::uint32_t scales_high = (w[2] & low4) | ((w[0] >> 6) & low2) << 4;
  const std::uint32_t mins_high = ((w[2] >> 4) & low4) | ((w[1] >> 6) & low2) << 4;
  return _mm_set_epi32(static_cast<int>(mins_high), static_cast<int>(mins_low), static_cast<int>(scales_high),
                       static_cast<int>(scales_low));
}

namespace {

// A Q4_K super-block read as stored (d, dmin, 12 bytes of scales and
// minimums, then qs[128]: values 64c .. 64c + 31 in the low nibbles of
// qs[32c ..], the next 32 in the high ones), whose nibbles multiply a
// token's quants straight from the block, as ggml's vec_dot_q4_K_q8_K
// does, with no unpacked copy: the same lanes as kq::unpack_q4_k's
// SuperBlock gives (kquant_products.hpp's Unpacked). With FifthBit, Q5_K:
// qh[32] before qs, bit 2c of qh[l] the fifth bit of value 64c + l and
// bit 2c + 1 that of value 64c + 32 + l. Scales and minimums are spread
// into registers once, for all the tokens the block meets. In an unnamed
// namespace, so that each path keeps its own copy.
template <bool FifthBit>
class K4Block {
 public:
  explicit K4Block(const std::byte* block)
      : qh_(kq::bytes_of(block) + 16),
        qs_(kq::bytes_of(block) + (FifthBit ? 48 : 16)),
        d_(half_at(block)),
        dmin_(half_at(block + 2)) {
    const __m256i both = _mm256_broadcastsi128_si256(scales_mins_k4(kq::bytes_of(block) + 4));
    // Scale j in every 16-bit lane (byte j, then a zero byte: 0x80 reads as 0).
    for (int j = 0; j < 8; ++j)
      scale_[j] = _mm256_shuffle_epi8(both, _mm256_set1_epi16(static_cast<short>(0x8000 | j)));
    // Minimum j in lanes 2j and 2j + 1, against the sums of 16 quants.
    mins_ = _mm256_shuffle_epi8(
        both, _mm256_setr_epi8(8, -128, 8, -128, 9, -128, 9, -128, 10, -128, 10, -128, 11, -128, 11, -128, 12, -128, 12,
                               -128, 13, -128, 13, -128, 14, -128, 14, -128, 15, -128, 15, -128));
  }
  float d() const { return d_; }
  float dmin() const { return dmin_; }

  // ggml's eight lanes against a token's 256 quants x (kquant_products.hpp):
  // per 64 values, the values (0..15, or 0..31 with the fifth bit:
  // unsigned) times x in pairs (at most 2 * 31 * 127), times the
  // sub-blocks' scales and added in pairs; lane k holds values 32c + 4k ..
  // 32c + 4k + 3 of each chunk c of 32, as super_block_lanes.
  void lanes(const std::int8_t* x, const std::int16_t*, std::int32_t* out) const {
    const __m256i mask = _mm256_set1_epi8(0x0F);
    __m256i acc = _mm256_setzero_si256();
    [[maybe_unused]] __m256i fifth = FifthBit ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh_)) : __m256i{};
    for (int c = 0; c < 4; ++c) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs_ + 32 * c));
      __m256i low = _mm256_and_si256(q, mask), high = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
      if constexpr (FifthBit) {
        // Bit 0 of each byte of `fifth` is value 64c + l's, bit 1 value 64c + 32 + l's.
        const __m256i one = _mm256_set1_epi8(1);
        low = _mm256_or_si256(low, _mm256_slli_epi16(_mm256_and_si256(fifth, one), 4));
        high = _mm256_or_si256(high, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(fifth, 1), one), 4));
        fifth = _mm256_srli_epi16(fifth, 2);
      }
      const __m256i x_low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 64 * c));
      const __m256i x_high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 64 * c + 32));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(low, x_low), scale_[2 * c]));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(high, x_high), scale_[2 * c + 1]));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), acc);
  }
  // M_b: the minimums against the sums of 16 quants.
  std::int32_t mins(const std::int16_t* sums) const {
    return lane_sum(_mm256_madd_epi16(mins_, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums))));
  }

 private:
  const std::uint8_t* qh_;  // Q5_K only
  const std::uint8_t* qs_;
  float d_, dmin_;
  __m256i scale_[8];
  __m256i mins_;
};
using Q4KBlock = K4Block<false>;
using Q5KBlock = K4Block<true>;

// A Q6_K super-block read as stored (ql[128], qh[64], scales[16] int8,
// d: per half of 128 values, value 32k + l has its low four bits in
// ql[l + 32 (k % 2)], the low nibble for k < 2, and its high two in qh[l]
// at bit 2k; stored as v + 32), as ggml's vec_dot_q6_K_q8_K reads it: the
// stored values (0..63, unsigned) times x in pairs (at most 2 * 63 * 127),
// times the groups' scales, less 32 times the scales against the sums of
// 16 quants: sum (v + 32) x - 32 sum x = sum v x per group, in the lanes
// ggml's vec_dot_q6_K_q8_K keeps them (kquant_products.hpp's Unpacked).
class Q6KBlock {
 public:
  explicit Q6KBlock(const std::byte* block) : bytes_(kq::bytes_of(block)), d_(half_at(block + 208)) {
    scales_ = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes_ + 192)));
    // Chunk c of 32 values: group 2c's scale in lanes 0-7, 2c + 1's in
    // 8-15, picked from the eight scales of its half of the block.
    const __m256i halves[2] = {_mm256_permute2x128_si256(scales_, scales_, 0x00),
                               _mm256_permute2x128_si256(scales_, scales_, 0x11)};
    for (int c = 0; c < 8; ++c) {
      const int lo = 2 * (2 * c % 8), hi = lo + 2;
      const __m256i pick = _mm256_set_m128i(_mm_set1_epi16(static_cast<short>((hi + 1) << 8 | hi)),
                                            _mm_set1_epi16(static_cast<short>((lo + 1) << 8 | lo)));
      scale_[c] = _mm256_shuffle_epi8(halves[c / 4], pick);
    }
  }
  float d() const { return d_; }
  float dmin() const { return 0.0f; }

  // ggml's eight lanes: lane k of the stored values' products, less 32
  // times the scales against the sums of 16 of groups 2k and 2k + 1.
  void lanes(const std::int8_t* x, const std::int16_t* sums, std::int32_t* out) const {
    const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
    __m256i acc = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const std::uint8_t* ql = bytes_ + 64 * half;
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes_ + 128 + 32 * half));
      // The two high bits of value 32k + l, from bit 2k of qh[l], to bits 4-5.
      const __m256i values[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45)),
          _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, bits45)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                          _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45))};
      for (int k = 0; k < 4; ++k) {
        const int c = 4 * half + k;
        const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * c));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(values[k], a), scale_[c]));
      }
    }
    const __m256i offsets = _mm256_madd_epi16(scales_, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_sub_epi32(acc, _mm256_slli_epi32(offsets, 5)));
  }
  std::int32_t mins(const std::int16_t*) const { return 0; }

 private:
  const std::uint8_t* bytes_;
  float d_;
  __m256i scales_;    // the 16 scales as int16
  __m256i scale_[8];  // per 32 values, as madd() takes them
};

}  // namespace

}  // namespace accord::cpu::x86
