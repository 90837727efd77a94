#include "kernels/cpu/matmul.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/aligned.hpp"
#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/quant.hpp"

namespace accord::cpu {

namespace {

bool is_block_type(WeightType type) { return type == WeightType::q8_0 || type == WeightType::q4_0; }

// Rounds half away from zero into [-127, 127], exactly as std::round
// would, but without a library call per value, so the loop vectorizes:
// v - trunc(v) is exact for |v| < 2^23. NaN gives 0, so a non-finite
// activation cannot reach an undefined cast.
std::int8_t to_level(float v) {
  if (!(v == v)) return 0;
  const float clamped = std::clamp(v, -127.0f, 127.0f);
  int level = static_cast<int>(clamped);
  const float fraction = clamped - static_cast<float>(level);
  level += static_cast<int>(fraction >= 0.5f) - static_cast<int>(fraction <= -0.5f);
  return static_cast<std::int8_t>(level);
}

// The activations' 8-bit form, reused across calls on the calling thread
// (the rank's own), so a decode step allocates nothing.
struct QuantizedBatch {
  AlignedVector<std::int8_t> quants;
  std::vector<float> scales;        // of one token
  AlignedVector<float> scale_lanes;  // Activations::scale_lanes
};

// Quantizes every token of x into `batch`, for a product with `cols` inputs.
void quantize_batch(const float* x, int tokens, int cols, QuantizedBatch& batch) {
  const int pairs = block_pairs(cols);
  batch.quants.resize(static_cast<std::size_t>(tokens) * cols);
  batch.scales.assign(static_cast<std::size_t>(pairs) * 2, 0.0f);
  batch.scale_lanes.resize(static_cast<std::size_t>(tokens) * pairs * kLanes);
  for (int t = 0; t < tokens; ++t) {
    const auto offset = static_cast<std::size_t>(t) * cols;
    quantize_activations(x + offset, cols, batch.quants.data() + offset, batch.scales.data());
    float* lanes = batch.scale_lanes.data() + static_cast<std::size_t>(t) * pairs * kLanes;
    for (std::size_t i = 0; i < static_cast<std::size_t>(pairs) * kLanes; ++i) {
      lanes[i] = batch.scales[i / (kLanes / 2)];
    }
  }
}

}  // namespace

void quantize_activations(const float* x, int n, std::int8_t* quants, float* scales) {
  for (int b = 0; b < n / kBlock; ++b) {
    const float* block = x + static_cast<std::ptrdiff_t>(b) * kBlock;
    float amax = 0.0f;
    for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(block[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    scales[b] = d;
    for (int j = 0; j < kBlock; ++j) quants[b * kBlock + j] = to_level(block[j] * id);
  }
}

void matmul(ThreadPool& pool, float* out, const float* x, const Matrix& w, int batch) {
  Activations activations{x, nullptr, nullptr, batch, w.cols};
  if (is_block_type(w.type)) {
    thread_local QuantizedBatch quantized;
    quantize_batch(x, batch, w.cols, quantized);
    activations.quants = quantized.quants.data();
    activations.scale_lanes = quantized.scale_lanes.data();
  }
  const MatmulRows rows = active_kernels().by_type[static_cast<int>(w.type)];
  // Rows are split among threads; each weight row is read once per batch.
  pool.parallel_for(
      static_cast<std::size_t>(w.rows),
      [&](std::size_t begin, std::size_t end) {
        rows(w, activations, out, static_cast<int>(begin), static_cast<int>(end));
      },
      16);
}

float dot(const float* a, const float* b, int n) { return active_kernels().dot(a, b, n); }

void dots(const float* rows, std::size_t stride, int count, const float* x, int n, float* out) {
  active_kernels().dots(rows, stride, count, x, n, out);
}

void axpy(float a, const float* x, float* y, int n) { active_kernels().axpy(a, x, y, n); }

void dequantize_row(const Matrix& w, int row, float* out) {
  const std::byte* data = w.row(row);
  const auto n = static_cast<std::size_t>(w.cols);
  switch (w.type) {
    case WeightType::f32: std::memcpy(out, data, n * sizeof(float)); break;
    case WeightType::f16: dequantize_f16(out, data, n); break;
    case WeightType::q8_0: dequantize_q8_0(out, data, n); break;
    case WeightType::q4_0: dequantize_q4_0(out, data, n); break;
  }
}

void dequantize(const Matrix& w, float* out) {
  for (int r = 0; r < w.rows; ++r) dequantize_row(w, r, out + static_cast<std::size_t>(r) * w.cols);
}

}  // namespace accord::cpu
