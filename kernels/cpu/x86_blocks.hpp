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

}  // namespace accord::cpu::x86
