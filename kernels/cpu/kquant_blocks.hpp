// A K-quant (or IQ4_XS) super-block unpacked into one form for every type: 256 small
// integers, a scale and a minimum per 16 values, and the two f16 scales
// as floats. Its value i is (d * scale[i / 16]) * q[i] - (dmin * min[i / 16]),
// exactly ggml's dequantize_row_q*_K. The products (matmul_tiles.hpp) and
// the conversion to float (kquant.cpp) read it. Internal to kernels/cpu.
//
// Static: each kernel path keeps its own copy, built for its instruction
// set (matmul_tiles.hpp says why that matters). Integer work only, so every
// copy gives the same bits.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "kernels/cpu/kquant.hpp"
#include "kernels/cpu/quant.hpp"

namespace accord::cpu::kq {

inline constexpr int kValues = 256;
inline constexpr int kGroups = 16;  // of 16 values, each with its scale

struct SuperBlock {
  // Q2_K 0..3, Q3_K -4..3, Q4_K 0..15, Q5_K 0..31, Q6_K -32..31, IQ4_XS -127..113
  std::int8_t q[kValues];
  std::int16_t scale[kGroups];  // Q3_K and IQ4_XS -32..31, Q6_K -128..127, else 0..63
  std::int16_t min[kGroups];    // 0 for Q3_K, Q6_K and IQ4_XS, which have none
  float d = 0.0f, dmin = 0.0f;
};

// The block's bytes as unsigned chars: loops over them vectorize on
// bytes, where std::byte's conversions to int kept them scalar.
static inline const std::uint8_t* bytes_of(const std::byte* p) { return reinterpret_cast<const std::uint8_t*>(p); }

static inline float half_at(const std::byte* p) {
  const std::uint8_t* b = bytes_of(p);
  return f16_to_f32(static_cast<std::uint16_t>(b[0] | b[1] << 8));
}

// Q4_K's and Q5_K's 6-bit scale and minimum of sub-block j (of 32 values)
// from their 12 packed bytes (ggml's get_scale_min_k4).
static inline void scale_min_k4(int j, const std::uint8_t* packed, int& scale, int& min) {
  if (j < 4) {
    scale = packed[j] & 63;
    min = packed[j + 4] & 63;
  } else {
    scale = (packed[j + 4] & 0xF) | (packed[j - 4] >> 6) << 4;
    min = (packed[j + 4] >> 4) | (packed[j] >> 6) << 4;
  }
}

// Q4_K and Q5_K: d, dmin, 12 bytes of scales; per sub-block of 32 values one
// scale and one minimum, each serving two groups of 16.
static inline void unpack_scales_k4(const std::byte* block, SuperBlock& u) {
  u.d = half_at(block);
  u.dmin = half_at(block + 2);
  for (int j = 0; j < 8; ++j) {
    int scale, min;
    scale_min_k4(j, bytes_of(block) + 4, scale, min);
    u.scale[2 * j] = u.scale[2 * j + 1] = static_cast<std::int16_t>(scale);
    u.min[2 * j] = u.min[2 * j + 1] = static_cast<std::int16_t>(min);
  }
}

// d, dmin, scales[12], qs[128]: values 64c .. 64c + 31 in the low nibbles
// of qs[32c ..], the next 32 in the high ones.
static inline void unpack_q4_k(const std::byte* block, SuperBlock& u) {
  unpack_scales_k4(block, u);
  const std::uint8_t* qs = bytes_of(block) + 16;
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      u.q[64 * c + l] = static_cast<std::int8_t>(qs[32 * c + l] & 0xF);
      u.q[64 * c + 32 + l] = static_cast<std::int8_t>(qs[32 * c + l] >> 4);
    }
  }
}

// d, dmin, scales[12], qh[32], qs[128]: Q4_K's nibbles plus a fifth bit,
// bit 2c of qh[l] for value 64c + l and bit 2c + 1 for value 64c + 32 + l.
static inline void unpack_q5_k(const std::byte* block, SuperBlock& u) {
  unpack_scales_k4(block, u);
  const std::uint8_t* qh = bytes_of(block) + 16;
  const std::uint8_t* qs = bytes_of(block) + 48;
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      u.q[64 * c + l] = static_cast<std::int8_t>((qs[32 * c + l] & 0xF) | (qh[l] >> (2 * c) & 1) << 4);
      u.q[64 * c + 32 + l] = static_cast<std::int8_t>((qs[32 * c + l] >> 4) | (qh[l] >> (2 * c + 1) & 1) << 4);
    }
  }
}

// ql[128], qh[64], scales[16] (int8), d: per half of 128 values, value
// 32k + l has its low four bits in ql[l + 32 (k % 2)] (low nibble for
// k < 2), its high two in qh[l] at bit 2k; stored as v + 32.
static inline void unpack_q6_k(const std::byte* block, SuperBlock& u) {
  for (int half = 0; half < 2; ++half) {
    const std::uint8_t* ql = bytes_of(block) + 64 * half;
    const std::uint8_t* qh = bytes_of(block) + 128 + 32 * half;
    std::int8_t* q = u.q + 128 * half;
    for (int l = 0; l < 32; ++l) {
      q[l] = static_cast<std::int8_t>(((ql[l] & 0xF) | (qh[l] & 3) << 4) - 32);
      q[l + 32] = static_cast<std::int8_t>(((ql[l + 32] & 0xF) | (qh[l] >> 2 & 3) << 4) - 32);
      q[l + 64] = static_cast<std::int8_t>(((ql[l] >> 4) | (qh[l] >> 4 & 3) << 4) - 32);
      q[l + 96] = static_cast<std::int8_t>(((ql[l + 32] >> 4) | (qh[l] >> 6) << 4) - 32);
    }
  }
  for (int g = 0; g < kGroups; ++g) {
    u.scale[g] = static_cast<std::int8_t>(bytes_of(block)[192 + g]);
    u.min[g] = 0;
  }
  u.d = half_at(block + 208);
  u.dmin = 0.0f;
}

// scales[16] (scale in the low nibble, minimum in the high), qs[64], d,
// dmin: per half of 128 values, value 32j + l in byte l of that half's 32
// at bit 2j.
static inline void unpack_q2_k(const std::byte* block, SuperBlock& u) {
  const std::uint8_t* scales = bytes_of(block);
  for (int g = 0; g < kGroups; ++g) {
    u.scale[g] = static_cast<std::int16_t>(scales[g] & 0xF);
    u.min[g] = static_cast<std::int16_t>(scales[g] >> 4);
  }
  for (int half = 0; half < 2; ++half) {
    const std::uint8_t* qs = bytes_of(block) + 16 + 32 * half;
    for (int j = 0; j < 4; ++j) {
      std::int8_t* q = u.q + 128 * half + 32 * j;
      for (int l = 0; l < 32; ++l) q[l] = static_cast<std::int8_t>(qs[l] >> (2 * j) & 3);
    }
  }
  u.d = half_at(block + 80);
  u.dmin = half_at(block + 82);
}

// hmask[32], qs[64], scales[12], d: Q2_K's two bits, less 4 where bit
// i / 32 of hmask[i % 32] is clear; 6-bit scales stored as s + 32, low
// nibbles in bytes 0-7, high two bits in bytes 8-11.
static inline void unpack_q3_k(const std::byte* block, SuperBlock& u) {
  const std::uint8_t* scales = bytes_of(block) + 96;
  for (int g = 0; g < kGroups; ++g) {
    const int low = g < 8 ? scales[g] & 0xF : scales[g - 8] >> 4;
    const int high = scales[8 + g % 4] >> (2 * (g / 4)) & 3;
    u.scale[g] = static_cast<std::int16_t>((low | high << 4) - 32);
    u.min[g] = 0;
  }
  const std::uint8_t* hmask = bytes_of(block);
  for (int half = 0; half < 2; ++half) {
    const std::uint8_t* qs = bytes_of(block) + 32 + 32 * half;
    for (int j = 0; j < 4; ++j) {
      const int shift = 2 * j, bit = 4 * half + j;
      std::int8_t* q = u.q + 128 * half + 32 * j;
      for (int l = 0; l < 32; ++l) {
        q[l] = static_cast<std::int8_t>(((qs[l] >> shift & 3) | (hmask[l] >> bit & 1) << 2) - 4);
      }
    }
  }
  u.d = half_at(block + 108);
  u.dmin = 0.0f;
}

// ggml's kvalues_iq4nl: IQ4_XS's 16 levels.
inline constexpr std::int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                               1,    13,   25,  38,  53,  69,  89,  113};

// The levels of 16 bytes of IQ4_XS (or IQ4_NL) indices: low nibbles to
// q[0..16), high ones to q[16..32). A table lookup either way; the x86 paths
// (compiled with AVX2) look up 16 at once and store the 32 levels in one
// piece, so that a 32-byte load of them is forwarded from the store (two
// 16-byte stores made IQ4_NL's products 3.5 times slower).
static inline void iq4_levels(const std::uint8_t* qs, std::int8_t* q) {
#if defined(__AVX2__)
  const __m128i levels = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Levels));
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i low = _mm_shuffle_epi8(levels, _mm_and_si128(packed, mask));
  const __m128i high = _mm_shuffle_epi8(levels, _mm_and_si128(_mm_srli_epi16(packed, 4), mask));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_set_m128i(high, low));
#else
  for (int j = 0; j < 16; ++j) {
    q[j] = kIq4Levels[qs[j] & 0xF];
    q[j + 16] = kIq4Levels[qs[j] >> 4];
  }
#endif
}

// d, scales_h (u16), scales_l[4], qs[128]: per sub-block of 32 a 6-bit scale
// stored as s + 32 (low nibble in scales_l, two high bits in scales_h), and
// values j and j + 16 in the low and high nibble of its qs[j], indices
// into kIq4Levels.
static inline void unpack_iq4_xs(const std::byte* block, SuperBlock& u) {
  const std::uint8_t* b = bytes_of(block);
  const int scales_h = b[2] | b[3] << 8;
  for (int ib = 0; ib < 8; ++ib) {
    const int low = b[4 + ib / 2] >> (4 * (ib % 2)) & 0xF;
    const int high = scales_h >> (2 * ib) & 3;
    u.scale[2 * ib] = u.scale[2 * ib + 1] = static_cast<std::int16_t>((low | high << 4) - 32);
    u.min[2 * ib] = u.min[2 * ib + 1] = 0;
    iq4_levels(b + 8 + 16 * ib, u.q + 32 * ib);
  }
  u.d = half_at(block);
  u.dmin = 0.0f;
}

// How ggml's CPU kernels (x86, AVX2 and up) order a type's float sums for
// one token (kernel_table.hpp): its vec_dot_*_q8_K's eight lanes, or the
// repacked gemv of rows in eights (Q4_K; Q2_K where AVX512 is there).
enum class Order { lanes, repacked };

// The formats as template arguments of the products: block bytes, the
// unpacking, whether the values carry a minimum, and ggml's order.
template <std::size_t Bytes, void (*Unpack)(const std::byte*, SuperBlock&), bool Mins, Order O = Order::lanes>
struct Format {
  static constexpr std::size_t kBlockBytes = Bytes;
  static constexpr bool kMins = Mins;
  static constexpr Order kOrder = O;
  static constexpr bool kQ6Offset = Unpack == unpack_q6_k;
  static void unpack(const std::byte* block, SuperBlock& u) { Unpack(block, u); }
};
using Q2K = Format<kQ2_KBlockBytes, unpack_q2_k, true, Order::repacked>;
using Q3K = Format<kQ3_KBlockBytes, unpack_q3_k, false>;
using Q4K = Format<kQ4_KBlockBytes, unpack_q4_k, true, Order::repacked>;
using Q5K = Format<kQ5_KBlockBytes, unpack_q5_k, true>;
using Q6K = Format<kQ6_KBlockBytes, unpack_q6_k, false>;
using IQ4XS = Format<kIQ4_XSBlockBytes, unpack_iq4_xs, false>;

}  // namespace accord::cpu::kq
