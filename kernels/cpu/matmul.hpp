// Matrix products of activations by weight matrices of any stored type
// (matrix.hpp), on the path isa.hpp chose. The order of arithmetic is
// defined once, in kernel_table.hpp: results are bit-identical for every
// path, pool size and batch size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/cpu/matrix.hpp"
#include "kernels/cpu/thread_pool.hpp"

namespace accord::cpu {

// The version of the kernels' arithmetic, that is of the bits a forward
// pass gives. Raised whenever the canonical order (kernel_table.hpp) or an
// elementwise formula changes, so that results one build saved (a prompt
// cache's keys and values) are never mixed with another build's.
// 1: SwiGLU and attention's softmax through the C library's expf;
// 2: through exp_poly (vector_math.hpp).
inline constexpr int kArithmeticVersion = 2;

// out[t][r] = dot(w[r], x[t]). For weights in blocks of 32 (Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1, IQ4_NL) each token of x is first quantized to 8 bits
// per block of 32, and for the K-quants to Q8_K, as llama.cpp does.
// x: (batch, w.cols)  out: (batch, w.rows)
void matmul(ThreadPool& pool, float* out, const float* x, const Matrix& w, int batch);

// One product of a group that shares its input (matmul_group).
struct Product {
  float* out = nullptr;  // (batch, w->rows)
  const Matrix* w = nullptr;
};

// Several products of one input x (batch, cols) in one pass of the pool: x
// is quantized once for the block types, and the threads split the rows of
// all the products together, so a layer's queries, keys and values cost
// one wait for the pool instead of three. Every w has `cols` columns;
// each out equals what matmul gives for its w alone.
void matmul_group(ThreadPool& pool, const float* x, int batch, int cols, std::span<const Product> products);

// The feed-forward's gate function.
// silu_ggml: silu_mul_ggml (ops.hpp).
enum class GateActivation { silu, silu_ggml, gelu_tanh };

// Consecutive tokens [first_token, first_token + tokens) of a batch.
struct TokenSlice {
  int first_token = 0;
  int tokens = 0;
};

// One product of a batch's slice (matmul_slices).
struct SliceProduct {
  TokenSlice slice;
  const Matrix* w = nullptr;
  float* out = nullptr;  // (slice.tokens, w->rows)
};

// Several products, each of its own slice of x (batch, cols), in one pass
// of the pool after x is prepared once: a mixture of experts' experts, each
// over the tokens routed to it, cost one wait for the pool instead of one
// each. Every w has `cols` columns; each out equals what matmul gives for
// its w and its slice alone.
void matmul_slices(ThreadPool& pool, const float* x, int batch, int cols, std::span<const SliceProduct> products);

// One gated product of a batch's slice (gated_matmul_slices).
struct GatedSlice {
  TokenSlice slice;
  const Matrix* gate = nullptr;
  const Matrix* up = nullptr;   // gate's shape
  float* hidden = nullptr;      // (slice.tokens, gate->rows)
  float* up_scratch = nullptr;  // (slice.tokens, gate->rows)
};

// hidden = silu(x gate^T) * (x up^T) elementwise (the feed-forward's
// SwiGLU), in one pass of the pool: a thread gates the rows it computed at
// once. up_scratch receives x up^T. gate and up have the same shape.
// x: (batch, gate.cols)  hidden, up_scratch: (batch, gate.rows)
// With `activation` gelu_tanh: gelu(x gate^T) * (x up^T) (GeGLU, ops.hpp's
// gelu_tanh_mul).
void gated_matmul(ThreadPool& pool, float* hidden, float* up_scratch, const float* x, int batch, const Matrix& gate,
                  const Matrix& up, GateActivation activation = GateActivation::silu);

// gated_matmul of several slices of x (batch, cols) in one pass of the
// pool, as matmul_slices; each hidden equals what gated_matmul gives for
// its slice alone.
void gated_matmul_slices(ThreadPool& pool, const float* x, int batch, int cols, std::span<const GatedSlice> products,
                         GateActivation activation);

// Dot product of a[n] and b[n] in the canonical F32 order.
float dot(const float* a, const float* b, int n);

// Row `row` of w as floats: out (w.cols).
void dequantize_row(const Matrix& w, int row, float* out);
// All of w as floats: out (w.rows, w.cols).
void dequantize(const Matrix& w, float* out);

// x (n, a multiple of 32) in 8 bits per block: quants (n), scales (n / 32).
// Scale amax / 127; values rounded half away from zero.
void quantize_activations(const float* x, int n, std::int8_t* quants, float* scales);

}  // namespace accord::cpu
