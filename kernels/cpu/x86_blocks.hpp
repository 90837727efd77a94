// Block helpers shared by the two x86 paths (kernels_avx2.cpp and
// kernels_avx512.cpp), which include this header after <immintrin.h> and
// are both compiled with AVX2. Static: each path keeps its own copy, built
// for its own instruction set (matmul_tiles.hpp says why that matters).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

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
  const __m256i pairs = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)),
                                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)));
  const __m128i four = _mm_add_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
  const __m128i two = _mm_add_epi32(four, _mm_shuffle_epi32(four, 0x4E));
  return _mm_cvtsi128_si32(_mm_add_epi32(two, _mm_shuffle_epi32(two, 0xB1)));
}

}  // namespace accord::cpu::x86
