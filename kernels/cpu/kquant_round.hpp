// ggml's rounding of the K-quant quantizers. Internal to kernels/cpu.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace accord::cpu::kq {

// Rounds to the nearest integer, ties to even, for |v| < 2^22, as ggml's
// nearest_int: adding 1.5 * 2^23 leaves the integer in the low mantissa
// bits. Through the bits, not a cast, so no input is undefined (NaN or a
// huge value gives some integer in [-2^22, 2^22)).
static inline int nearest_int(float v) {
  const float shifted = v + 12582912.0f;
  std::int32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  return (bits & 0x007FFFFF) - 0x00400000;
}

// The value of largest magnitude among x[0 .. n), with its sign (the first
// of equal magnitudes), which ggml's quantizers map to their extreme level.
static inline float signed_max(const float* x, std::size_t n) {
  float amax = 0.0f, max = 0.0f;
  for (std::size_t j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

}  // namespace accord::cpu::kq
