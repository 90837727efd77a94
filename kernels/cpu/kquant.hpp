// ggml's K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K), IQ4_XS (per 32 values
// a 6-bit scale, 16 non-linear levels), BF16, and Q8_K, the
// activations' 8-bit form the K-quant products take: layouts, conversion
// to float, and ggml's reference quantizers (quantize_row_*_ref, without an
// importance matrix), so that accord's files equal llama-quantize's block
// for block.
//
// A K-quant stores 256 values in a super-block: one or two f16 scales for
// the whole, and per 16 or 32 values a small integer scale (and for Q2_K,
// Q4_K and Q5_K a small integer minimum). Each function takes whole
// super-blocks: `n` must be a multiple of kSuperBlock.
#pragma once

#include <cstddef>
#include <cstdint>

namespace accord::cpu {

inline constexpr std::size_t kSuperBlock = 256;  // values per K-quant super-block
// ggml's block_q*_K, in order of their fields:
inline constexpr std::size_t kQ2_KBlockBytes = 16 + 64 + 2 + 2;        // scales, qs, d, dmin
inline constexpr std::size_t kQ3_KBlockBytes = 32 + 64 + 12 + 2;       // hmask, qs, scales, d
inline constexpr std::size_t kQ4_KBlockBytes = 2 + 2 + 12 + 128;       // d, dmin, scales, qs
inline constexpr std::size_t kQ5_KBlockBytes = 2 + 2 + 12 + 32 + 128;  // d, dmin, scales, qh, qs
inline constexpr std::size_t kQ6_KBlockBytes = 128 + 64 + 16 + 2;      // ql, qh, scales, d
inline constexpr std::size_t kIQ4_XSBlockBytes = 2 + 2 + 4 + 128;      // d, scales_h, scales_l, qs
// IQ4_NL: IQ4_XS's 16 levels in blocks of 32 values (not a super-block),
// an f16 scale and qs[16], values j and j + 16 in byte j's low and high nibble.
inline constexpr std::size_t kIQ4_NLBlockBytes = 2 + 16;  // d, qs

// bfloat16 <-> binary32 as ggml converts: round to nearest even, NaN
// stays a quiet NaN.
float bf16_to_f32(std::uint16_t h);
std::uint16_t f32_to_bf16(float f);

// src: n values as stored  dst: (n) floats, as ggml's dequantize_row_*.
void dequantize_bf16(float* dst, const std::byte* src, std::size_t n);
void dequantize_q2_k(float* dst, const std::byte* src, std::size_t n);
void dequantize_q3_k(float* dst, const std::byte* src, std::size_t n);
void dequantize_q4_k(float* dst, const std::byte* src, std::size_t n);
void dequantize_q5_k(float* dst, const std::byte* src, std::size_t n);
void dequantize_q6_k(float* dst, const std::byte* src, std::size_t n);
void dequantize_iq4_xs(float* dst, const std::byte* src, std::size_t n);
void dequantize_iq4_nl(float* dst, const std::byte* src, std::size_t n);  // n: a multiple of 32

// src: (n) floats  dst: the stored bytes, as quantize_row_*_ref writes them.
void quantize_bf16(std::byte* dst, const float* src, std::size_t n);
void quantize_q2_k(std::byte* dst, const float* src, std::size_t n);
void quantize_q3_k(std::byte* dst, const float* src, std::size_t n);
void quantize_q4_k(std::byte* dst, const float* src, std::size_t n);
void quantize_q5_k(std::byte* dst, const float* src, std::size_t n);
void quantize_q6_k(std::byte* dst, const float* src, std::size_t n);
void quantize_iq4_xs(std::byte* dst, const float* src, std::size_t n);
// ggml's quantize_iq4_nl without an importance matrix; n a multiple of 32.
void quantize_iq4_nl(std::byte* dst, const float* src, std::size_t n);

// Q8_K, as ggml's quantize_row_q8_K_ref: per super-block, the value of
// largest magnitude m maps to -127, scale d = 1 / (-127 / m), quants
// rounded to nearest even, and the sum of each 16 quants. (Quants are also
// kept above -128, which finite input never reaches.)
// x: (n)  quants: (n)  scales: (n / 256)  sums: (n / 16)
void quantize_q8_k(const float* x, std::size_t n, std::int8_t* quants, float* scales, std::int16_t* sums);

}  // namespace accord::cpu
