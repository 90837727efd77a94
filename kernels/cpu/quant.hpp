// Number formats of GGUF tensors: IEEE half precision and ggml's block
// quantizations Q8_0 and Q4_0, converted to and from float.
//
// accord dequantizes at load (see docs/gguf.md), so these run once per
// weight, not per token. Each function handles whole blocks of 32 values;
// `n` must be a multiple of kQuantBlock for the block formats.
#pragma once

#include <cstddef>
#include <cstdint>

namespace accord::cpu {

inline constexpr std::size_t kQuantBlock = 32;          // values per Q8_0 / Q4_0 block
inline constexpr std::size_t kQ8_0BlockBytes = 2 + 32;  // f16 scale, 32 x int8
inline constexpr std::size_t kQ4_0BlockBytes = 2 + 16;  // f16 scale, 32 x 4-bit

// IEEE 754 binary16 <-> binary32; round to nearest even, overflow to
// infinity, NaN stays NaN.
float f16_to_f32(std::uint16_t h);
std::uint16_t f32_to_f16(float f);

// src: n values of the format as stored (little-endian)  dst: (n) floats.
void dequantize_f16(float* dst, const std::byte* src, std::size_t n);
void dequantize_q8_0(float* dst, const std::byte* src, std::size_t n);
void dequantize_q4_0(float* dst, const std::byte* src, std::size_t n);

// src: (n) floats  dst: the stored bytes. Q8_0 and Q4_0 follow ggml's
// reference quantizers (quantize_row_q8_0_ref, quantize_row_q4_0_ref), so
// accord's files equal llama.cpp's for the same input.
void quantize_f16(std::byte* dst, const float* src, std::size_t n);
void quantize_q8_0(std::byte* dst, const float* src, std::size_t n);
void quantize_q4_0(std::byte* dst, const float* src, std::size_t n);

}  // namespace accord::cpu
