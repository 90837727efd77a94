// Each CUDA kernel against the CPU kernel it mirrors, on random inputs.
#pragma once

#include <algorithm>
#include <cmath>
#include <span>

#include "kernels/cpu/matrix.hpp"

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

// The shape of a model's decode step.
struct DecodeShape {
  cpu::WeightType type;
  int dim, hidden, layers, n_heads, n_kv_heads, vocab, seq_len;
};

// Times each kernel of a decode step on device 0, one launch at a time
// (the median of several), and prints it with the weights' bytes it reads
// per second: how near each comes to the bandwidth, and so how much of a
// step the gaps between kernels take.
void time_decode_kernels(const DecodeShape& shape);

}  // namespace accord::cuda
