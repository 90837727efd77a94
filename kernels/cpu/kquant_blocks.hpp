// A K-quant super-block unpacked into one form for every type: 256 small
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

#include "kernels/cpu/kquant.hpp"
#include "kernels/cpu/quant.hpp"

namespace accord::cpu::kq {

inline constexpr int kValues = 256;
inline constexpr int kGroups = 16;  // of 16 values, each with its scale

struct SuperBlock {
  std::int8_t q[kValues];       // Q2_K 0..3, Q3_K -4..3, Q4_K 0..15, Q5_K 0..31, Q6_K -32..31
  std::int16_t scale[kGroups];  // Q3_K -32..31, Q6_K -128..127, else 0..63
  std::int16_t min[kGroups];    // 0 for Q3_K and Q6_K, which have none
  float d = 0.0f, dmin = 0.0f;
};

static inline unsigned byte_at(const std::byte* p, int i) { return std::to_integer<unsigned>(p[i]); }

static inline float half_at(const std::byte* p) {
  return f16_to_f32(static_cast<std::uint16_t>(byte_at(p, 0) | byte_at(p, 1) << 8));
}

// Q4_K's and Q5_K's 6-bit scale and minimum of sub-block j (of 32 values)
// from their 12 packed bytes (ggml's get_scale_min_k4).
static inline void scale_min_k4(int j, const std::byte* packed, int& scale, int& min) {
  if (j < 4) {
    scale = static_cast<int>(byte_at(packed, j) & 63);
    min = static_cast<int>(byte_at(packed, j + 4) & 63);
  } else {
    scale = static_cast<int>((byte_at(packed, j + 4) & 0xF) | (byte_at(packed, j - 4) >> 6) << 4);
    min = static_cast<int>((byte_at(packed, j + 4) >> 4) | (byte_at(packed, j) >> 6) << 4);
  }
}

// Q4_K and Q5_K: d, dmin, 12 bytes of scales; per sub-block of 32 values one
// scale and one minimum, each serving two groups of 16.
static inline void unpack_scales_k4(const std::byte* block, SuperBlock& u) {
  u.d = half_at(block);
  u.dmin = half_at(block + 2);
  for (int j = 0; j < 8; ++j) {
    int scale, min;
    scale_min_k4(j, block + 4, scale, min);
    u.scale[2 * j] = u.scale[2 * j + 1] = static_cast<std::int16_t>(scale);
    u.min[2 * j] = u.min[2 * j + 1] = static_cast<std::int16_t>(min);
  }
}

// d, dmin, scales[12], qs[128]: values 64c .. 64c + 31 in the low nibbles
// of qs[32c ..], the next 32 in the high ones.
static inline void unpack_q4_k(const std::byte* block, SuperBlock& u) {
  unpack_scales_k4(block, u);
  const std::byte* qs = block + 16;
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const unsigned packed = byte_at(qs, 32 * c + l);
      u.q[64 * c + l] = static_cast<std::int8_t>(packed & 0xF);
      u.q[64 * c + 32 + l] = static_cast<std::int8_t>(packed >> 4);
    }
  }
}

// d, dmin, scales[12], qh[32], qs[128]: Q4_K's nibbles plus a fifth bit,
// bit 2c of qh[l] for value 64c + l and bit 2c + 1 for value 64c + 32 + l.
static inline void unpack_q5_k(const std::byte* block, SuperBlock& u) {
  unpack_scales_k4(block, u);
  const std::byte* qh = block + 16;
  const std::byte* qs = block + 48;
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const unsigned packed = byte_at(qs, 32 * c + l), high = byte_at(qh, l) >> (2 * c);
      u.q[64 * c + l] = static_cast<std::int8_t>((packed & 0xF) | (high & 1) << 4);
      u.q[64 * c + 32 + l] = static_cast<std::int8_t>((packed >> 4) | (high >> 1 & 1) << 4);
    }
  }
}

// ql[128], qh[64], scales[16] (int8), d: per half of 128 values, value
// 32k + l has its low four bits in ql[l + 32 (k % 2)] (low nibble for
// k < 2), its high two in qh[l] at bit 2k; stored as v + 32.
static inline void unpack_q6_k(const std::byte* block, SuperBlock& u) {
  for (int half = 0; half < 2; ++half) {
    const std::byte* ql = block + 64 * half;
    const std::byte* qh = block + 128 + 32 * half;
    std::int8_t* q = u.q + 128 * half;
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const unsigned low = byte_at(ql, l + 32 * (k % 2)) >> (4 * (k / 2)) & 0xF;
        const unsigned high = byte_at(qh, l) >> (2 * k) & 3;
        q[32 * k + l] = static_cast<std::int8_t>(static_cast<int>(low | high << 4) - 32);
      }
    }
  }
  for (int g = 0; g < kGroups; ++g) {
    u.scale[g] = static_cast<std::int8_t>(byte_at(block, 192 + g));
    u.min[g] = 0;
  }
  u.d = half_at(block + 208);
  u.dmin = 0.0f;
}

// scales[16] (scale in the low nibble, minimum in the high), qs[64], d,
// dmin: per half of 128 values, value 32j + l in qs[l] (of that half's
// 32 bytes) at bit 2j.
static inline void unpack_q2_k(const std::byte* block, SuperBlock& u) {
  for (int g = 0; g < kGroups; ++g) {
    u.scale[g] = static_cast<std::int16_t>(byte_at(block, g) & 0xF);
    u.min[g] = static_cast<std::int16_t>(byte_at(block, g) >> 4);
  }
  for (int half = 0; half < 2; ++half) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        const unsigned packed = byte_at(block, 16 + 32 * half + l);
        u.q[128 * half + 32 * j + l] = static_cast<std::int8_t>(packed >> (2 * j) & 3);
      }
    }
  }
  u.d = half_at(block + 80);
  u.dmin = half_at(block + 82);
}

// hmask[32], qs[64], scales[12], d: Q2_K's two bits, less 4 where bit
// i / 32 of hmask[i % 32] is clear; 6-bit scales stored as s + 32, low
// nibbles in bytes 0-7, high two bits in bytes 8-11.
static inline void unpack_q3_k(const std::byte* block, SuperBlock& u) {
  const std::byte* scales = block + 96;
  for (int g = 0; g < kGroups; ++g) {
    const unsigned low = g < 8 ? byte_at(scales, g) & 0xF : byte_at(scales, g - 8) >> 4;
    const unsigned high = byte_at(scales, 8 + g % 4) >> (2 * (g / 4)) & 3;
    u.scale[g] = static_cast<std::int16_t>(static_cast<int>(low | high << 4) - 32);
    u.min[g] = 0;
  }
  for (int half = 0; half < 2; ++half) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        const unsigned packed = byte_at(block, 32 + 32 * half + l);
        const unsigned high = byte_at(block, l) >> (4 * half + j) & 1;  // hmask: bit i / 32 of byte i % 32
        u.q[128 * half + 32 * j + l] =
            static_cast<std::int8_t>(static_cast<int>((packed >> (2 * j) & 3) | high << 2) - 4);
      }
    }
  }
  u.d = half_at(block + 108);
  u.dmin = 0.0f;
}

// The minimums' part of a super-block's product: sum over groups of
// min * (sum of the group's 16 activation quants), exact.
static inline std::int32_t min_sum(const SuperBlock& u, const std::int16_t* sums) {
  std::int32_t total = 0;
  for (int g = 0; g < kGroups; ++g) total += u.min[g] * sums[g];
  return total;
}

// The formats as template arguments of the products: block bytes, the
// unpacking, and whether the values carry a minimum.
template <std::size_t Bytes, void (*Unpack)(const std::byte*, SuperBlock&), bool Mins>
struct Format {
  static constexpr std::size_t kBlockBytes = Bytes;
  static constexpr bool kMins = Mins;
  static void unpack(const std::byte* block, SuperBlock& u) { Unpack(block, u); }
};
using Q2K = Format<kQ2_KBlockBytes, unpack_q2_k, true>;
using Q3K = Format<kQ3_KBlockBytes, unpack_q3_k, false>;
using Q4K = Format<kQ4_KBlockBytes, unpack_q4_k, true>;
using Q5K = Format<kQ5_KBlockBytes, unpack_q5_k, true>;
using Q6K = Format<kQ6_KBlockBytes, unpack_q6_k, false>;

}  // namespace accord::cpu::kq
