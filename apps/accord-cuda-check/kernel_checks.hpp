// Each CUDA kernel against the CPU kernel it mirrors, on random inputs.
#pragma once

#include <algorithm>
#include <cmath>
#include <span>

namespace accord::cuda {

inline double largest_magnitude(std::span<const float> values) {
  double magnitude = 0.0;
  for (float v : values) magnitude = std::max(magnitude, std::fabs(double{v}));
  return magnitude;
}

// The largest difference of got from want, as a share of want's largest
// magnitude: how the checks compare the device's results with the CPU's.
inline double relative_error(std::span<const float> got, std::span<const float> want) {
  double difference = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) difference = std::max(difference, std::fabs(double{got[i]} - want[i]));
  return difference / std::max(1e-12, largest_magnitude(want));
}

// Runs every check on device 0 and prints one line per check; the number
// that failed. Throws CudaFailure when the device cannot run them.
int run_kernel_checks();

}  // namespace accord::cuda
