// One query head's attention as ggml's CPU backend computes it with
// AVX512, an F32 cache and flash attention off (AttentionHeads::ggml in
// ops.hpp; an F16 or Q8_0 cache's values converted exactly, not ggml's F16
// or Q8_0 path), written once over a path's vector type V
// (matmul_tiles.hpp says why templates). Internal to kernels/cpu.
#pragma once

#include <cstddef>
#include <vector>

#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/vector_math.hpp"

namespace accord::cpu::tiles {

// Row p's n values from `lead` on (KvRows::lead) into `to`, as floats:
// an F16 or Q8_0 row's converted exactly (Format::read where it has one).
template <class V, class Format>
void read_row(const KvRows& rows, int p, int n, float* to) {
  const std::byte* row = rows.row(p);
  if constexpr (requires { Format::template read<V>(row, 0, n, to); }) {
    Format::template read<V>(row, rows.lead, n, to);
  } else {
    for (int i = 0; i < n; ++i) to[i] = Format::template at<V>(row, rows.lead + i);
  }
}

// ggml_vec_dot_f32 of a and b (n values): per 64 values four accumulators
// of 16 lanes (fma), added (0 + 2, 1 + 3, then 0 + 1) and reduced, then
// the values past the last 64 one by one, without fma.
template <class V>
float ggml_vec_dot(const float* a, const float* b, int n) {
  float lanes[4][16] = {};
  const int whole = n / 64 * 64;
  for (int i = 0; i < whole; i += 64) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 16; ++l) {
        const int k = i + 16 * j + l;
        lanes[j][l] = __builtin_fmaf(a[k], b[k], lanes[j][l]);
      }
    }
  }
  for (int l = 0; l < 16; ++l) lanes[0][l] = (lanes[0][l] + lanes[2][l]) + (lanes[1][l] + lanes[3][l]);
  float sum = reduce16_ggml<V>(lanes[0]);
  for (int i = whole; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// The weighted values: for each dimension d, the sum over the head's KV
// cells p of value(p)[d] * weight(p), as ggml_vec_dot_f32 computes it for
// one token (four sets of 16 lanes, blocks of 64), whatever the batch.
// Cell k of a block (set k / 16, lane k % 16) has an accumulator per
// dimension, lanes[k * n + d], so that the cells are read row by row; each
// accumulator takes its products in ggml's order. Cells outside start ..
// pos weigh 0: a block of them before `start` adds nothing, those after
// `pos` add +0 once. row: (n) scratch; lanes: (64 * n) scratch.
template <class V, class Format>
void weighted_values(const GgmlHead& h, float* row, float* lanes) {
  constexpr int block = 64;
  const int n = h.head_size;
  for (int i = 0; i < block * n; ++i) lanes[i] = 0.0f;
  const int last = h.pos / block * block;
  for (int b = h.start / block * block; b <= last; b += block) {
    for (int p = b > h.start ? b : h.start; p <= h.pos && p < b + block; ++p) {
      read_row<V, Format>(h.values, p, n, row);
      float* cell = lanes + static_cast<std::ptrdiff_t>(p - b) * n;
      for (int d = 0; d < n; ++d) cell[d] = __builtin_fmaf(row[d], h.scores[p], cell[d]);
    }
  }
  const bool trailing = last + block < (h.pos / 256 + 1) * 256;
  if (trailing) {
    for (int i = 0; i < block * n; ++i) lanes[i] = lanes[i] + 0.0f;
  }
  for (int d = 0; d < n; ++d) {
    float folded[16];
    for (int l = 0; l < 16; ++l) {
      const float* at = lanes + d;
      folded[l] = (at[l * n] + at[(32 + l) * n]) + (at[(16 + l) * n] + at[(48 + l) * n]);
    }
    h.out[d] = reduce16_ggml<V>(folded);
  }
}

// KernelTable::attend_ggml. Its scratch is the thread's own, grown to the
// largest head seen (a decode step allocates nothing).
template <class V, class Format>
void attend_ggml(const GgmlHead& h) {
  thread_local std::vector<float> scratch;
  const auto floats = static_cast<std::size_t>(65 * h.head_size);
  if (scratch.size() < floats) scratch.resize(floats);
  float* row = scratch.data();
  float max = -__builtin_inff();
  for (int p = h.start; p <= h.pos; ++p) {
    read_row<V, Format>(h.keys, p, h.head_size, row);
    h.scores[p] = ggml_vec_dot<V>(row, h.q, h.head_size) * h.scale;
    max = h.scores[p] > max ? h.scores[p] : max;
  }
  // The softmax: e^(s - max) per 16 cells, each block's sum reduced and
  // added in double; then times the inverse of the sum, rounded to float.
  double sum = 0.0;
  for (int b = h.start / 16 * 16; b <= h.pos; b += 16) {
    float block[16];
    for (int l = 0; l < 16; ++l) {
      const int p = b + l;
      const bool held = p >= h.start && p <= h.pos;
      block[l] = held ? exp_ggml<V>(h.scores[p] - max) : 0.0f;
      if (held) h.scores[p] = block[l];
    }
    sum += static_cast<double>(reduce16_ggml<V>(block));
  }
  const auto inverse = static_cast<float>(1.0 / sum);
  for (int p = h.start; p <= h.pos; ++p) h.scores[p] *= inverse;
  weighted_values<V, Format>(h, row, row + h.head_size);
}

}  // namespace accord::cpu::tiles
