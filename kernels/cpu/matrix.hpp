// A weight matrix as its file stores it: F32, F16, BF16, ggml's blocks of
// 32 Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (quant.hpp) and IQ4_NL, or its K-quants
// Q2_K to Q6_K and IQ4_XS (kquant.hpp), row-major (rows, cols). The kernels read it where it lies,
// usually inside the model's file mapping; no dequantized copy is made.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/kquant.hpp"
#include "kernels/cpu/quant.hpp"

namespace accord::cpu {

enum class WeightType : std::uint8_t {
  f32,
  f16,
  q8_0,
  q4_0,
  bf16,
  q2_k,
  q3_k,
  q4_k,
  q5_k,
  q6_k,
  iq4_xs,
  q4_1,
  q5_0,
  q5_1,
  iq4_nl
};
inline constexpr int kWeightTypes = 15;

// A type as a row of one table: GGUF's name and number (ggml_type), and
// how many bytes hold how many values. A row is whole blocks.
struct TypeTraits {
  const char* name;
  std::uint32_t ggml_type;
  std::size_t block_values;
  std::size_t block_bytes;
};

// A switch, not an array, so that CUDA device code may call it (a
// namespace-scope array is out of its reach).
constexpr TypeTraits traits(WeightType type) {
  switch (type) {
    case WeightType::f32: return {"F32", 0, 1, 4};
    case WeightType::f16: return {"F16", 1, 1, 2};
    case WeightType::q8_0: return {"Q8_0", 8, kQuantBlock, kQ8_0BlockBytes};
    case WeightType::q4_0: return {"Q4_0", 2, kQuantBlock, kQ4_0BlockBytes};
    case WeightType::bf16: return {"BF16", 30, 1, 2};
    case WeightType::q2_k: return {"Q2_K", 10, kSuperBlock, kQ2_KBlockBytes};
    case WeightType::q3_k: return {"Q3_K", 11, kSuperBlock, kQ3_KBlockBytes};
    case WeightType::q4_k: return {"Q4_K", 12, kSuperBlock, kQ4_KBlockBytes};
    case WeightType::q5_k: return {"Q5_K", 13, kSuperBlock, kQ5_KBlockBytes};
    case WeightType::q6_k: return {"Q6_K", 14, kSuperBlock, kQ6_KBlockBytes};
    case WeightType::iq4_xs: return {"IQ4_XS", 23, kSuperBlock, kIQ4_XSBlockBytes};
    case WeightType::q4_1: return {"Q4_1", 3, kQuantBlock, kQ4_1BlockBytes};
    case WeightType::q5_0: return {"Q5_0", 6, kQuantBlock, kQ5_0BlockBytes};
    case WeightType::q5_1: return {"Q5_1", 7, kQuantBlock, kQ5_1BlockBytes};
    case WeightType::iq4_nl: return {"IQ4_NL", 20, kQuantBlock, kIQ4_NLBlockBytes};
  }
  return {"?", ~0u, 1, 0};
}

// "F32", "F16", "Q8_0", "Q4_K", ...: GGUF's names.
const char* to_string(WeightType type);

// n values of `type` as stored -> floats, and back (the reference
// quantizers; quant.hpp, kquant.hpp). n a multiple of the type's block.
void dequantize_values(WeightType type, float* dst, const std::byte* src, std::size_t n);
void quantize_values(WeightType type, std::byte* dst, const float* src, std::size_t n);

// A K-quant (or IQ4_XS): 256 values per super-block, multiplied against
// Q8_K activations.
constexpr bool is_k_quant(WeightType type) { return traits(type).block_values == kSuperBlock; }

// Bytes of `cols` values of `type`; cols must be a multiple of the type's
// block (traits().block_values).
constexpr std::size_t row_bytes(WeightType type, std::size_t cols) {
  return cols / traits(type).block_values * traits(type).block_bytes;
}

struct Matrix {
  WeightType type = WeightType::f32;
  const std::byte* data = nullptr;  // rows * row_bytes(); no alignment needed
  int rows = 0;
  int cols = 0;

  static Matrix of_floats(const float* data, int rows, int cols) {
    return {WeightType::f32, reinterpret_cast<const std::byte*>(data), rows, cols};
  }
  constexpr std::size_t row_bytes() const { return cpu::row_bytes(type, static_cast<std::size_t>(cols)); }
  constexpr std::size_t bytes() const { return static_cast<std::size_t>(rows) * row_bytes(); }
  constexpr const std::byte* row(int r) const { return data + static_cast<std::size_t>(r) * row_bytes(); }
  bool operator==(const Matrix&) const = default;
};

}  // namespace accord::cpu
