// Conversions of the K-quants and BF16 to float, and the activations' Q8_K
// form. The reference quantizers are in kquant_ref.cpp.
#include <bit>
#include <cmath>
#include <cstring>

#include "kernels/cpu/kquant.hpp"
#include "kernels/cpu/kquant_blocks.hpp"
#include "kernels/cpu/kquant_round.hpp"

namespace accord::cpu {

namespace {

// Every super-block of src through Unpack, then ggml's formula per value.
template <std::size_t BlockBytes>
void dequantize_super_blocks(float* dst, const std::byte* src, std::size_t n,
                             void (*unpack)(const std::byte*, kq::SuperBlock&)) {
  kq::SuperBlock u;
  for (std::size_t b = 0; b < n / kSuperBlock; ++b) {
    unpack(src + b * BlockBytes, u);
    float* out = dst + b * kSuperBlock;
    for (int g = 0; g < kq::kGroups; ++g) {
      const float scale = u.d * static_cast<float>(u.scale[g]);
      const float min = u.dmin * static_cast<float>(u.min[g]);
      for (int i = 16 * g; i < 16 * g + 16; ++i) out[i] = scale * static_cast<float>(u.q[i]) - min;
    }
  }
}

}  // namespace

float bf16_to_f32(std::uint16_t h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }

std::uint16_t f32_to_bf16(float f) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((bits >> 16) | 64u);  // quiet NaN
  return static_cast<std::uint16_t>((bits + (0x7FFFu + ((bits >> 16) & 1u))) >> 16);
}

void dequantize_bf16(float* dst, const std::byte* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint16_t h;
    std::memcpy(&h, src + 2 * i, sizeof h);
    dst[i] = bf16_to_f32(h);
  }
}

void quantize_bf16(std::byte* dst, const float* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint16_t h = f32_to_bf16(src[i]);
    std::memcpy(dst + 2 * i, &h, sizeof h);
  }
}

void dequantize_q2_k(float* dst, const std::byte* src, std::size_t n) {
  dequantize_super_blocks<kQ2_KBlockBytes>(dst, src, n, kq::unpack_q2_k);
}
void dequantize_q3_k(float* dst, const std::byte* src, std::size_t n) {
  dequantize_super_blocks<kQ3_KBlockBytes>(dst, src, n, kq::unpack_q3_k);
}
void dequantize_q4_k(float* dst, const std::byte* src, std::size_t n) {
  dequantize_super_blocks<kQ4_KBlockBytes>(dst, src, n, kq::unpack_q4_k);
}
void dequantize_q5_k(float* dst, const std::byte* src, std::size_t n) {
  dequantize_super_blocks<kQ5_KBlockBytes>(dst, src, n, kq::unpack_q5_k);
}
void dequantize_q6_k(float* dst, const std::byte* src, std::size_t n) {
  dequantize_super_blocks<kQ6_KBlockBytes>(dst, src, n, kq::unpack_q6_k);
}
void dequantize_iq4_xs(float* dst, const std::byte* src, std::size_t n) {
  dequantize_super_blocks<kIQ4_XSBlockBytes>(dst, src, n, kq::unpack_iq4_xs);
}

void dequantize_iq4_nl(float* dst, const std::byte* src, std::size_t n) {
  std::int8_t q[32];
  for (std::size_t b = 0; b < n / 32; ++b) {
    const std::byte* block = src + b * kIQ4_NLBlockBytes;
    const float d = kq::half_at(block);
    kq::iq4_levels(kq::bytes_of(block) + 2, q);
    for (std::size_t j = 0; j < 32; ++j) dst[32 * b + j] = d * static_cast<float>(q[j]);
  }
}

void quantize_q8_k(const float* x, std::size_t n, std::int8_t* quants, float* scales, std::int16_t* sums) {
  for (std::size_t b = 0; b < n / kSuperBlock; ++b) {
    const float* v = x + b * kSuperBlock;
    std::int8_t* q = quants + b * kSuperBlock;
    const float max = kq::signed_max(v, kSuperBlock);
    const float iscale = max != 0.0f ? -127.0f / max : 0.0f;
    scales[b] = max != 0.0f ? 1.0f / iscale : 0.0f;
    for (std::size_t j = 0; j < kSuperBlock; ++j) {
      const int level = kq::nearest_int(iscale * v[j]);
      q[j] = static_cast<std::int8_t>(level < -127 ? -127 : (level > 127 ? 127 : level));
    }
    for (std::size_t g = 0; g < kSuperBlock / 16; ++g) {
      int sum = 0;
      for (std::size_t j = 0; j < 16; ++j) sum += q[16 * g + j];
      sums[b * (kSuperBlock / 16) + g] = static_cast<std::int16_t>(sum);
    }
  }
}

}  // namespace accord::cpu
