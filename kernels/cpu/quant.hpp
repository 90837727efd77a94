// Number formats of GGUF tensors: IEEE half precision and ggml's block
// quantizations of 32 values Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1, converted to
// and from float.
//
// The products read the blocks where they lie (matmul.hpp); these convert
// whole tensors (a file's norms, `accord convert`) and embedding rows. Each
// function handles whole blocks of 32 values; `n` must be a multiple of
// kQuantBlock for the block formats.
#pragma once

#include <cstddef>
#include <cstdint>

namespace accord::cpu {

inline constexpr std::size_t kQuantBlock = 32;          // values per Q8_0 / Q4_0 block
inline constexpr std::size_t kQ8_0BlockBytes = 2 + 32;  // f16 scale, 32 x int8
inline constexpr std::size_t kQ4_0BlockBytes = 2 + 16;  // f16 scale, 32 x 4-bit
// ggml's block_q4_1, block_q5_0 and block_q5_1, in order of their fields: a
// value is d * q (+ m), q 4 bits (Q4_1, 0..15) or 5 bits (Q5_1 0..31, Q5_0
// -16..15 stored as q + 16); values j and j + 16 share byte j of qs (low,
// high nibble) and take their fifth bit from bit j and j + 16 of qh.
inline constexpr std::size_t kQ4_1BlockBytes = 2 + 2 + 16;      // d, m, qs
inline constexpr std::size_t kQ5_0BlockBytes = 2 + 4 + 16;      // d, qh, qs
inline constexpr std::size_t kQ5_1BlockBytes = 2 + 2 + 4 + 16;  // d, m, qh, qs

// IEEE 754 binary16 <-> binary32; round to nearest even, overflow to
// infinity, NaN stays NaN.
float f16_to_f32(std::uint16_t h);
std::uint16_t f32_to_f16(float f);

// src: n values of the format as stored (little-endian)  dst: (n) floats.
void dequantize_f16(float* dst, const std::byte* src, std::size_t n);
void dequantize_q8_0(float* dst, const std::byte* src, std::size_t n);
void dequantize_q4_0(float* dst, const std::byte* src, std::size_t n);
void dequantize_q4_1(float* dst, const std::byte* src, std::size_t n);
void dequantize_q5_0(float* dst, const std::byte* src, std::size_t n);
void dequantize_q5_1(float* dst, const std::byte* src, std::size_t n);

// src: (n) floats  dst: the stored bytes. The block formats follow ggml's
// reference quantizers (quantize_row_q8_0_ref, quantize_row_q4_0_ref, ...),
// which llama-quantize uses without an importance matrix, so accord's files
// equal llama.cpp's for the same input.
void quantize_f16(std::byte* dst, const float* src, std::size_t n);
void quantize_q8_0(std::byte* dst, const float* src, std::size_t n);
void quantize_q4_0(std::byte* dst, const float* src, std::size_t n);
void quantize_q4_1(std::byte* dst, const float* src, std::size_t n);
void quantize_q5_0(std::byte* dst, const float* src, std::size_t n);
void quantize_q5_1(std::byte* dst, const float* src, std::size_t n);

}  // namespace accord::cpu
