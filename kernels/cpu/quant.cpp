#include "kernels/cpu/quant.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/kquant_round.hpp"

namespace accord::cpu {

namespace {

std::uint16_t load_u16(const std::byte* p) {
  std::uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void store_u16(std::byte* p, std::uint16_t v) { std::memcpy(p, &v, sizeof v); }

std::uint32_t load_u32(const std::byte* p) {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Truncates v toward zero into [lo, hi]; NaN gives 0. Finite input never
// reaches the clamps; they keep non-finite weights from undefined casts.
int to_level(float v, int lo, int hi) {
  if (!(v == v)) return 0;
  return static_cast<int>(std::clamp(v, static_cast<float>(lo), static_cast<float>(hi)));
}

// The 32 levels of a Q4_1 or Q5 block (quant.hpp): value j's low four bits
// from byte j % 16 of qs, its fifth from bit j of qh (0 for Q4_1).
void block_levels(const std::byte* qs, std::uint32_t qh, int* q) {
  for (std::size_t j = 0; j < kQuantBlock / 2; ++j) {
    const unsigned packed = std::to_integer<unsigned>(qs[j]);
    q[j] = static_cast<int>((packed & 0x0Fu) | (qh >> j & 1u) << 4);
    q[j + 16] = static_cast<int>((packed >> 4) | (qh >> (j + 16) & 1u) << 4);
  }
}

// The inverse: qs's nibbles, and the fifth bits as qh.
std::uint32_t pack_levels(const int* q, std::byte* qs) {
  std::uint32_t qh = 0;
  for (std::size_t j = 0; j < kQuantBlock / 2; ++j) {
    qs[j] = static_cast<std::byte>((q[j] & 0x0F) | (q[j + 16] & 0x0F) << 4);
    qh |= static_cast<std::uint32_t>(q[j] >> 4 & 1) << j | static_cast<std::uint32_t>(q[j + 16] >> 4 & 1) << (j + 16);
  }
  return qh;
}

// Q4_1 and Q5_1 blocks: d, m, [qh,] qs; value q * d + m.
void dequantize_with_min(float* dst, const std::byte* src, std::size_t n, std::size_t block_bytes, bool five_bits) {
  int q[kQuantBlock];
  for (std::size_t b = 0; b < n / kQuantBlock; ++b) {
    const std::byte* block = src + b * block_bytes;
    const float d = f16_to_f32(load_u16(block)), m = f16_to_f32(load_u16(block + 2));
    block_levels(block + (five_bits ? 8 : 4), five_bits ? load_u32(block + 4) : 0u, q);
    for (std::size_t j = 0; j < kQuantBlock; ++j) dst[b * kQuantBlock + j] = static_cast<float>(q[j]) * d + m;
  }
}

// Q4_1 and Q5_1 as quantize_row_q4_1_ref and quantize_row_q5_1_ref: levels
// 0..levels-1 from the block's minimum m, d = (max - m) / (levels - 1),
// rounded half up.
void quantize_with_min(std::byte* dst, const float* src, std::size_t n, std::size_t block_bytes, int levels) {
  const bool five_bits = levels == 32;
  int q[kQuantBlock];
  for (std::size_t b = 0; b < n / kQuantBlock; ++b) {
    const float* x = src + b * kQuantBlock;
    std::byte* block = dst + b * block_bytes;
    float min = std::numeric_limits<float>::max(), max = -std::numeric_limits<float>::max();
    for (std::size_t j = 0; j < kQuantBlock; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / static_cast<float>(levels - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(block, f32_to_f16(d));
    store_u16(block + 2, f32_to_f16(min));
    for (std::size_t j = 0; j < kQuantBlock; ++j) q[j] = to_level((x[j] - min) * id + 0.5f, 0, levels - 1);
    const std::uint32_t qh = pack_levels(q, block + (five_bits ? 8 : 4));
    if (five_bits) std::memcpy(block + 4, &qh, sizeof qh);
  }
}

}  // namespace

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1Fu;
  std::uint32_t mantissa = h & 0x3FFu;
  std::uint32_t bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);  // infinity or NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal half: normalise into a float.
    std::uint32_t e = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mantissa & 0x3FFu) << 13);
  }
  return std::bit_cast<float>(bits);
}

std::uint16_t f32_to_f16(float f) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // infinity or NaN (NaN keeps a mantissa bit)
    return static_cast<std::uint16_t>(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // rounds past 65504
  if (abs < 0x38800000u) {
    // Result is subnormal or zero: scale so that rounding to an integer
    // count of 2^-24 units is exact round-to-nearest-even.
    const float magnitude = std::bit_cast<float>(abs);
    const auto units = static_cast<std::uint32_t>(std::nearbyint(magnitude * 16777216.0f));
    return static_cast<std::uint16_t>(sign | units);
  }
  // Normal: drop 13 mantissa bits with round to nearest even.
  const std::uint32_t rounded = abs + 0xFFFu + ((abs >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

void dequantize_f16(float* dst, const std::byte* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16(src + 2 * i));
}

void dequantize_q8_0(float* dst, const std::byte* src, std::size_t n) {
  for (std::size_t b = 0; b < n / kQuantBlock; ++b) {
    const std::byte* block = src + b * kQ8_0BlockBytes;
    const float d = f16_to_f32(load_u16(block));
    for (std::size_t j = 0; j < kQuantBlock; ++j) {
      const auto q = static_cast<std::int8_t>(std::to_integer<std::uint8_t>(block[2 + j]));
      dst[b * kQuantBlock + j] = static_cast<float>(q) * d;
    }
  }
}

void dequantize_q4_0(float* dst, const std::byte* src, std::size_t n) {
  constexpr std::size_t half = kQuantBlock / 2;
  for (std::size_t b = 0; b < n / kQuantBlock; ++b) {
    const std::byte* block = src + b * kQ4_0BlockBytes;
    const float d = f16_to_f32(load_u16(block));
    float* out = dst + b * kQuantBlock;
    for (std::size_t j = 0; j < half; ++j) {
      const unsigned packed = std::to_integer<unsigned>(block[2 + j]);
      out[j] = static_cast<float>(static_cast<int>(packed & 0x0Fu) - 8) * d;
      out[j + half] = static_cast<float>(static_cast<int>(packed >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_1(float* dst, const std::byte* src, std::size_t n) {
  dequantize_with_min(dst, src, n, kQ4_1BlockBytes, false);
}

void dequantize_q5_1(float* dst, const std::byte* src, std::size_t n) {
  dequantize_with_min(dst, src, n, kQ5_1BlockBytes, true);
}

void dequantize_q5_0(float* dst, const std::byte* src, std::size_t n) {
  int q[kQuantBlock];
  for (std::size_t b = 0; b < n / kQuantBlock; ++b) {
    const std::byte* block = src + b * kQ5_0BlockBytes;
    const float d = f16_to_f32(load_u16(block));
    block_levels(block + 6, load_u32(block + 2), q);
    for (std::size_t j = 0; j < kQuantBlock; ++j) dst[b * kQuantBlock + j] = static_cast<float>(q[j] - 16) * d;
  }
}

void quantize_f16(std::byte* dst, const float* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) store_u16(dst + 2 * i, f32_to_f16(src[i]));
}

void quantize_q8_0(std::byte* dst, const float* src, std::size_t n) {
  for (std::size_t b = 0; b < n / kQuantBlock; ++b) {
    const float* x = src + b * kQuantBlock;
    std::byte* block = dst + b * kQ8_0BlockBytes;
    float amax = 0.0f;
    for (std::size_t j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(block, f32_to_f16(d));
    for (std::size_t j = 0; j < kQuantBlock; ++j) {
      const int q = to_level(std::roundf(x[j] * id), -127, 127);
      block[2 + j] = static_cast<std::byte>(static_cast<std::uint8_t>(static_cast<std::int8_t>(q)));
    }
  }
}

namespace {

// Q4_0's and Q5_0's scale: the block's value of largest magnitude, with its
// sign, over `extreme` (the lowest level less the offset), stored as an f16
// at the block's start. Returns its inverse, 0 for a block of zeros.
float store_scale_of_extreme(std::byte* block, const float* x, float extreme) {
  const float d = kq::signed_max(x, kQuantBlock) / extreme;
  store_u16(block, f32_to_f16(d));
  return d != 0.0f ? 1.0f / d : 0.0f;
}

}  // namespace

void quantize_q4_0(std::byte* dst, const float* src, std::size_t n) {
  constexpr std::size_t half = kQuantBlock / 2;
  for (std::size_t b = 0; b < n / kQuantBlock; ++b) {
    const float* x = src + b * kQuantBlock;
    std::byte* block = dst + b * kQ4_0BlockBytes;
    const float id = store_scale_of_extreme(block, x, -8.0f);
    auto level = [&](float v) { return static_cast<unsigned>(to_level(v * id + 8.5f, 0, 15)); };
    for (std::size_t j = 0; j < half; ++j) {
      block[2 + j] = static_cast<std::byte>(level(x[j]) | (level(x[j + half]) << 4));
    }
  }
}

void quantize_q4_1(std::byte* dst, const float* src, std::size_t n) {
  quantize_with_min(dst, src, n, kQ4_1BlockBytes, 16);
}

void quantize_q5_1(std::byte* dst, const float* src, std::size_t n) {
  quantize_with_min(dst, src, n, kQ5_1BlockBytes, 32);
}

void quantize_q5_0(std::byte* dst, const float* src, std::size_t n) {
  int q[kQuantBlock];
  for (std::size_t b = 0; b < n / kQuantBlock; ++b) {
    const float* x = src + b * kQuantBlock;
    std::byte* block = dst + b * kQ5_0BlockBytes;
    const float id = store_scale_of_extreme(block, x, -16.0f);
    for (std::size_t j = 0; j < kQuantBlock; ++j) q[j] = to_level(x[j] * id + 16.5f, 0, 31);
    const std::uint32_t qh = pack_levels(q, block + 6);
    std::memcpy(block + 2, &qh, sizeof qh);
  }
}

}  // namespace accord::cpu
