// A weight matrix as its file stores it: F32, F16, or ggml's block
// quantizations Q8_0 and Q4_0 (quant.hpp), row-major (rows, cols). The
// kernels read it where it lies, usually inside the model's file mapping;
// no dequantized copy is made.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/quant.hpp"

namespace accord::cpu {

enum class WeightType : std::uint8_t { f32, f16, q8_0, q4_0 };

// "F32", "F16", "Q8_0", "Q4_0": GGUF's names.
const char* to_string(WeightType type);

// Bytes of `cols` values of `type`; cols must be a multiple of 32 for the
// block formats. constexpr, so that the CUDA kernels call it too.
constexpr std::size_t row_bytes(WeightType type, std::size_t cols) {
  switch (type) {
    case WeightType::f32: return cols * 4;
    case WeightType::f16: return cols * 2;
    case WeightType::q8_0: return cols / kQuantBlock * kQ8_0BlockBytes;
    case WeightType::q4_0: return cols / kQuantBlock * kQ4_0BlockBytes;
  }
  return 0;
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
