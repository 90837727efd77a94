// One query head's attention as ggml's CPU backend computes it with
// AVX512, an F32 cache and flash attention off (AttentionHeads::ggml in
// ops.hpp; an F16 or Q8_0 cache's values converted exactly, not ggml's F16
// or Q8_0 path), written once over a path's vector type V
// (matmul_tiles.hpp says why templates). Internal to kernels/cpu.
#pragma once

#include <cstddef>

#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/vector_math.hpp"

namespace accord::cpu::tiles {

// ggml_vec_dot_f32 of a row of the cache, its n values from `lead` on
// (KvRows::lead), and b: per 64 values four accumulators of 16 lanes (fma),
// added (0 + 2, 1 + 3, then 0 + 1) and reduced, then the values past the
// last 64 one by one, without fma. An F16 or Q8_0 row's values are
// converted exactly first.
template <class V, class Format>
float ggml_vec_dot(const std::byte* a, int lead, const float* b, int n) {
  float lanes[4][16] = {};
  const int whole = n / 64 * 64;
  for (int i = 0; i < whole; i += 64) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 16; ++l) {
        const int k = i + 16 * j + l;
        lanes[j][l] = __builtin_fmaf(Format::template at<V>(a, lead + k), b[k], lanes[j][l]);
      }
    }
  }
  for (int l = 0; l < 16; ++l) lanes[0][l] = (lanes[0][l] + lanes[2][l]) + (lanes[1][l] + lanes[3][l]);
  float sum = reduce16_ggml<V>(lanes[0]);
  for (int i = whole; i < n; ++i) sum += Format::template at<V>(a, lead + i) * b[i];
  return sum;
}

// Dimension d of the weighted values: sum over the head's KV cells p of
// value(p) * weight(p), as ggml_vec_dot_f32 computes it for one token
// (four sets of 16 lanes, blocks of 64), whatever the batch. Cells outside
// start .. pos weigh 0: a block of them before `start` adds nothing, those
// after `pos` add +0 once.
template <class V, class Format>
float weighted_values(const GgmlHead& h, int d) {
  constexpr int sets = 4, block = 16 * sets;
  float lanes[sets][16] = {};
  const int last = h.pos / block * block;
  for (int b = h.start / block * block; b <= last; b += block) {
    for (int j = 0; j < sets; ++j) {
      for (int l = 0; l < 16; ++l) {
        const int p = b + 16 * j + l;
        if (p < h.start || p > h.pos) continue;
        const float value = Format::template at<V>(h.values.row(p), h.values.lead + d);
        lanes[j][l] = __builtin_fmaf(value, h.scores[p], lanes[j][l]);
      }
    }
  }
  const bool trailing = last + block < (h.pos / 256 + 1) * 256;
  for (int j = 0; j < sets; ++j) {
    for (int l = 0; l < 16; ++l) lanes[j][l] = trailing ? lanes[j][l] + 0.0f : lanes[j][l];
  }
  for (int l = 0; l < 16; ++l) lanes[0][l] = (lanes[0][l] + lanes[2][l]) + (lanes[1][l] + lanes[3][l]);
  return reduce16_ggml<V>(lanes[0]);
}

// KernelTable::attend_ggml.
template <class V, class Format>
void attend_ggml(const GgmlHead& h) {
  float max = -__builtin_inff();
  for (int p = h.start; p <= h.pos; ++p) {
    h.scores[p] = ggml_vec_dot<V, Format>(h.keys.row(p), h.keys.lead, h.q, h.head_size) * h.scale;
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
  for (int d = 0; d < h.head_size; ++d) h.out[d] = weighted_values<V, Format>(h, d);
}

}  // namespace accord::cpu::tiles
