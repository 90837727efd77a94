// A weight matrix as its file stores it: F32, F16, or ggml's block
// quantizations Q8_0 and Q4_0 (quant.hpp), row-major (rows, cols). The
// kernels read it where it lies, usually inside the model's file mapping;
// no dequantized copy is made.
#pragma once

#include <cstddef>
#include <cstdint>

namespace accord::cpu {

enum class WeightType : std::uint8_t { f32, f16, q8_0, q4_0 };

// "F32", "F16", "Q8_0", "Q4_0": GGUF's names.
const char* to_string(WeightType type);

// Bytes of `cols` values of `type`; cols must be a multiple of 32 for the
// block formats.
std::size_t row_bytes(WeightType type, std::size_t cols);

struct Matrix {
  WeightType type = WeightType::f32;
  const std::byte* data = nullptr;  // rows * row_bytes(); no alignment needed
  int rows = 0;
  int cols = 0;

  static Matrix of_floats(const float* data, int rows, int cols) {
    return {WeightType::f32, reinterpret_cast<const std::byte*>(data), rows, cols};
  }
  std::size_t row_bytes() const { return cpu::row_bytes(type, static_cast<std::size_t>(cols)); }
  std::size_t bytes() const { return static_cast<std::size_t>(rows) * row_bytes(); }
  const std::byte* row(int r) const { return data + static_cast<std::size_t>(r) * row_bytes(); }
  bool operator==(const Matrix&) const = default;
};

}  // namespace accord::cpu
