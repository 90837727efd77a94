// Matrix products of activations by weight matrices of any stored type
// (matrix.hpp), on the path isa.hpp chose. The order of arithmetic is
// defined once, in kernel_table.hpp: results are bit-identical for every
// path, pool size and batch size.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matrix.hpp"
#include "kernels/cpu/thread_pool.hpp"

namespace accord::cpu {

// out[t][r] = dot(w[r], x[t]). For Q8_0 and Q4_0 weights each token of x is
// first quantized to 8 bits per block of 32, as llama.cpp does.
// x: (batch, w.cols)  out: (batch, w.rows)
void matmul(ThreadPool& pool, float* out, const float* x, const Matrix& w, int batch);

// Dot product of a[n] and b[n] in the canonical F32 order.
float dot(const float* a, const float* b, int n);
// out[i] = dot(rows + i * stride, x, n) for i < count.
void dots(const float* rows, std::size_t stride, int count, const float* x, int n, float* out);
// y[i] = fma(a, x[i], y[i]) for i < n.
void axpy(float a, const float* x, float* y, int n);

// Row `row` of w as floats: out (w.cols).
void dequantize_row(const Matrix& w, int row, float* out);
// All of w as floats: out (w.rows, w.cols).
void dequantize(const Matrix& w, float* out);

// x (n, a multiple of 32) in 8 bits per block: quants (n), scales (n / 32).
// Scale amax / 127; values rounded half away from zero.
void quantize_activations(const float* x, int n, std::int8_t* quants, float* scales);

}  // namespace accord::cpu
