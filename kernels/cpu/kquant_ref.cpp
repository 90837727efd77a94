// ggml's reference quantizers of the K-quants (ggml-quants.c,
// quantize_row_q*_K_ref, which llama-quantize uses without an importance
// matrix), step for step: the same float operations in the same order
// (the build never contracts them into fma), so the bytes are ggml's.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/kquant.hpp"
#include "kernels/cpu/kquant_round.hpp"
#include "kernels/cpu/quant.hpp"

namespace accord::cpu {

namespace {

using kq::nearest_int;

constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS: below it a group is all zero

void store_half(std::byte* p, float v) {
  const std::uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, sizeof h);
}

float half_of(float v) { return f16_to_f32(f32_to_f16(v)); }

std::uint8_t u8(int v) { return static_cast<std::uint8_t>(v); }

// Levels -nmax .. nmax - 1 with the largest-magnitude value at -nmax, then
// the scale among 19 nearby ones that best fits x with weights x^2 (ggml's
// make_qx_quants, rmse_type 1). L receives level + nmax.
float make_qx_quants(int n, int nmax, const float* x, std::int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, std::int8_t{0});
    return 0.0f;
  }
  const auto fit = [&](float iscale, float& sumlx, float& suml2, bool store) {
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
      if (store) L[i] = static_cast<std::int8_t>(l + nmax);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * static_cast<float>(l);
      suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
  };
  float sumlx, suml2;
  fit(static_cast<float>(-nmax) / max, sumlx, suml2, true);
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    fit(iscale, sumlx, suml2, false);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      fit(iscale, sumlx, suml2, true);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Levels 0 .. nmax with a minimum: the scale and minimum among nstep + 1
// trials that best fit x under `weights` (squared or absolute error);
// ggml's make_qkx2_quants. Returns the scale, *the_min = -minimum.
struct Qkx2Search {
  float rmin, rdelta;
  int nstep;
  bool use_mad;
};

float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, std::uint8_t* L, float* the_min,
                       Qkx2Search search) {
  float min = x[0], max = x[0], sum_w = weights[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + n, std::uint8_t{0});
    *the_min = -min;
    return 0.0f;
  }
  std::uint8_t Laux[32];
  const auto error_of = [&](const std::uint8_t* levels, float scale, float offset) {
    float error = 0;
    for (int i = 0; i < n; ++i) {
      float diff = scale * static_cast<float>(levels[i]) + offset - x[i];
      diff = search.use_mad ? std::fabs(diff) : diff * diff;
      error += weights[i] * diff;
    }
    return error;
  };
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  for (int i = 0; i < n; ++i) L[i] = u8(std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min)))));
  float best_error = error_of(L, scale, min);
  for (int is = 0; is <= search.nstep; ++is) {
    iscale = (search.rmin + search.rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min))));
      Laux[i] = u8(l);
      const float w = weights[i], lf = static_cast<float>(l);
      sum_l += w * lf;
      sum_l2 += w * lf * lf;
      sum_xl += w * lf * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (!(D > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    const float error = error_of(Laux, this_scale, this_min);
    if (error < best_error) {
      std::copy(Laux, Laux + n, L);
      best_error = error;
      scale = this_scale;
      min = this_min;
    }
  }
  *the_min = -min;
  return scale;
}

// Levels -nmax .. nmax - 1, then up to five passes moving single levels
// where that improves the weighted fit (ggml's make_q3_quants, do_rmse).
// L receives level + nmax.
float make_q3_quants(int n, int nmax, const float* x, std::int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, std::int8_t{0});
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
    L[i] = static_cast<std::int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int itry = 0; itry < 5; ++itry) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i], li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (!(slx > 0)) continue;
      float sl2 = suml2 - w * li * li;
      const int new_l = std::max(-nmax, std::min(nmax - 1, nearest_int(x[i] * sl2 / slx)));
      if (new_l == L[i]) continue;
      slx += w * x[i] * static_cast<float>(new_l);
      sl2 += w * static_cast<float>(new_l) * static_cast<float>(new_l);
      if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<std::int8_t>(new_l);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<std::int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Four 2-bit levels per byte: value j + 32k (of each 128) at bit 2k of
// byte j of that 128's 32 bytes.
void pack_2bit(const std::uint8_t* L, std::byte* qs) {
  for (int j = 0; j < 256; j += 128) {
    for (int l = 0; l < 32; ++l) {
      qs[j / 4 + l] = std::byte{u8(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6)};
    }
  }
}

}  // namespace

namespace {

// Q4_K's and Q5_K's common part: per sub-block of 32 a scale and minimum
// fit by make_qkx2_quants, both rounded to 6 bits against the largest
// (d and dmin, written at block[0..4), the 6-bit pairs packed at
// block[4..16)); then each value's level in 0..nmax under the rounded ones.
void k4_levels(const float* x, std::byte* block, int nmax, Qkx2Search search, std::uint8_t* L) {
  float scales[8], mins[8], weights[32], max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], search);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::uint8_t packed[12] = {};
  for (int j = 0; j < 8; ++j) {
    const std::uint8_t ls = std::min<std::uint8_t>(63, u8(nearest_int(inv_scale * scales[j])));
    const std::uint8_t lm = std::min<std::uint8_t>(63, u8(nearest_int(inv_min * mins[j])));
    if (j < 4) {
      packed[j] = ls;
      packed[j + 4] = lm;
    } else {
      packed[j + 4] = u8((ls & 0xF) | (lm & 0xF) << 4);
      packed[j - 4] = u8(packed[j - 4] | (ls >> 4) << 6);
      packed[j] = u8(packed[j] | (lm >> 4) << 6);
    }
  }
  store_half(block, max_scale / 63.f);
  store_half(block + 2, max_min / 63.f);
  std::memcpy(block + 4, packed, sizeof packed);
  const float d_all = half_of(max_scale / 63.f), dmin_all = half_of(max_min / 63.f);
  for (int j = 0; j < 8; ++j) {
    const int sc = j < 4 ? packed[j] & 63 : (packed[j + 4] & 0xF) | (packed[j - 4] >> 6) << 4;
    const int m = j < 4 ? packed[j + 4] & 63 : (packed[j + 4] >> 4) | (packed[j] >> 6) << 4;
    const float d = d_all * static_cast<float>(sc);
    if (d == 0.0f) continue;
    const float dm = dmin_all * static_cast<float>(m);
    for (int i = 32 * j; i < 32 * j + 32; ++i) L[i] = u8(std::max(0, std::min(nmax, nearest_int((x[i] + dm) / d))));
  }
}

void quantize_q4_k_block(const float* x, std::byte* block) {
  std::uint8_t L[256];
  k4_levels(x, block, 15, {-1.f, 0.1f, 20, false}, L);
  std::byte* q = block + 16;
  for (int j = 0; j < 256; j += 64) {
    for (int l = 0; l < 32; ++l) q[j / 2 + l] = std::byte{u8(L[j + l] | L[j + l + 32] << 4)};
  }
}

void quantize_q5_k_block(const float* x, std::byte* block) {
  std::uint8_t L[256];
  k4_levels(x, block, 31, {-0.5f, 0.1f, 15, false}, L);
  std::uint8_t qh[32] = {};
  std::byte* ql = block + 48;
  for (int c = 0; c < 4; ++c) {
    for (int j = 0; j < 32; ++j) {
      const int l1 = L[64 * c + j], l2 = L[64 * c + j + 32];
      qh[j] = u8(qh[j] | (l1 > 15) << (2 * c) | (l2 > 15) << (2 * c + 1));
      ql[32 * c + j] = std::byte{u8((l1 & 0xF) | (l2 & 0xF) << 4)};
    }
  }
  std::memcpy(block + 16, qh, sizeof qh);
}

void quantize_q6_k_block(const float* x, std::byte* block) {
  std::int8_t L[256];
  float scales[16], max_scale = 0, max_abs_scale = 0;
  for (int g = 0; g < 16; ++g) {
    scales[g] = make_qx_quants(16, 32, x + 16 * g, L + 16 * g);
    if (std::fabs(scales[g]) > max_abs_scale) {
      max_abs_scale = std::fabs(scales[g]);
      max_scale = scales[g];
    }
  }
  std::memset(block, 0, kQ6_KBlockBytes);
  if (max_abs_scale < kGroupMaxEps) return;  // all zero, d = 0
  const float iscale = -128.f / max_scale;
  store_half(block + 208, 1 / iscale);
  const float d_all = half_of(1 / iscale);
  for (int g = 0; g < 16; ++g) {
    const auto scale = static_cast<std::int8_t>(std::min(127, nearest_int(iscale * scales[g])));
    block[192 + g] = std::byte{u8(scale)};
    const float d = d_all * static_cast<float>(scale);
    if (d == 0.0f) continue;
    for (int i = 16 * g; i < 16 * g + 16; ++i) {
      L[i] = static_cast<std::int8_t>(std::max(-32, std::min(31, nearest_int(x[i] / d))) + 32);
    }
  }
  for (int half = 0; half < 2; ++half) {
    const std::int8_t* v = L + 128 * half;
    std::byte* ql = block + 64 * half;
    std::byte* qh = block + 128 + 32 * half;
    for (int l = 0; l < 32; ++l) {
      ql[l] = std::byte{u8((v[l] & 0xF) | (v[l + 64] & 0xF) << 4)};
      ql[l + 32] = std::byte{u8((v[l + 32] & 0xF) | (v[l + 96] & 0xF) << 4)};
      qh[l] = std::byte{u8(v[l] >> 4 | (v[l + 32] >> 4) << 2 | (v[l + 64] >> 4) << 4 | (v[l + 96] >> 4) << 6)};
    }
  }
}

// Q2_K's scales (low nibbles) or minimums (high) against the largest:
// 4 bits each; returns the f16 factor, 0 where all are 0.
float q2_k_nibbles(const float* values, float max, int shift, std::uint8_t* packed) {
  if (!(max > 0)) return 0.0f;
  const float iscale = 15.f / max;
  for (int g = 0; g < 16; ++g) packed[g] = u8(packed[g] | nearest_int(iscale * values[g]) << shift);
  return max / 15.f;
}

void quantize_q2_k_block(const float* x, std::byte* block) {
  std::uint8_t L[256], packed[16] = {};
  float scales[16], mins[16], weights[16], max_scale = 0, max_min = 0;
  for (int g = 0; g < 16; ++g) {
    for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * g + l]);
    scales[g] = make_qkx2_quants(16, 3, x + 16 * g, weights, L + 16 * g, &mins[g], {-0.5f, 0.1f, 15, true});
    if (scales[g] > max_scale) max_scale = scales[g];
    if (mins[g] > max_min) max_min = mins[g];
  }
  const float d_factor = q2_k_nibbles(scales, max_scale, 0, packed);
  const float dmin_factor = q2_k_nibbles(mins, max_min, 4, packed);
  store_half(block + 80, d_factor);
  store_half(block + 82, dmin_factor);
  std::memcpy(block, packed, sizeof packed);
  const float d_all = half_of(d_factor), dmin_all = half_of(dmin_factor);
  for (int g = 0; g < 16; ++g) {
    const float d = d_all * static_cast<float>(packed[g] & 0xF);
    if (d == 0.0f) continue;
    const float dm = dmin_all * static_cast<float>(packed[g] >> 4);
    for (int i = 16 * g; i < 16 * g + 16; ++i) L[i] = u8(std::max(0, std::min(3, nearest_int((x[i] + dm) / d))));
  }
  pack_2bit(L, block + 16);
}

// Q3_K's 16 scales as s + 32 in 6 bits: low nibbles in bytes 0-7, high
// two bits in bytes 8-11. Returns the f16 factor.
float q3_k_scales(const float* scales, float max_scale, std::uint8_t* packed) {
  if (max_scale == 0.0f) return 0.0f;
  const float iscale = -32.f / max_scale;
  for (int g = 0; g < 16; ++g) {
    const auto rounded = static_cast<std::int8_t>(nearest_int(iscale * scales[g]));
    const int l = std::max(-32, std::min(31, static_cast<int>(rounded))) + 32;
    if (g < 8) {
      packed[g] = u8(l & 0xF);
    } else {
      packed[g - 8] = u8(packed[g - 8] | (l & 0xF) << 4);
    }
    packed[8 + g % 4] = u8(packed[8 + g % 4] | (l >> 4) << (2 * (g / 4)));
  }
  return 1 / iscale;
}

void quantize_q3_k_block(const float* x, std::byte* block) {
  std::int8_t L[256];
  std::uint8_t packed[12] = {}, hmask[32] = {}, levels[256];
  float scales[16], max_scale = 0, amax = 0;
  for (int g = 0; g < 16; ++g) {
    scales[g] = make_q3_quants(16, 4, x + 16 * g, L + 16 * g);
    if (std::fabs(scales[g]) > amax) {
      amax = std::fabs(scales[g]);
      max_scale = scales[g];
    }
  }
  const float factor = q3_k_scales(scales, max_scale, packed);
  store_half(block + 108, factor);
  std::memcpy(block + 96, packed, sizeof packed);
  const float d_all = half_of(factor);
  for (int g = 0; g < 16; ++g) {
    const unsigned low = g < 8 ? packed[g] & 0xFu : packed[g - 8] >> 4u;
    const int sc = static_cast<int>(low | ((packed[8 + g % 4] >> (2 * (g / 4))) & 3u) << 4) - 32;
    const float d = d_all * static_cast<float>(sc);
    if (d == 0.0f) continue;
    for (int i = 16 * g; i < 16 * g + 16; ++i) {
      L[i] = static_cast<std::int8_t>(std::max(-4, std::min(3, nearest_int(x[i] / d))) + 4);
    }
  }
  for (int i = 0; i < 256; ++i) {
    const bool high = L[i] > 3;
    if (high) hmask[i % 32] = u8(hmask[i % 32] | 1 << (i / 32));
    levels[i] = u8(high ? L[i] - 4 : L[i]);
  }
  std::memcpy(block, hmask, sizeof hmask);
  pack_2bit(levels, block + 32);
}

// ggml's kvalues_iq4nl, and the index of the level nearest v (ties to the
// upper one only where strictly nearer: ggml's best_index_int8).
constexpr std::int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

int nearest_level(float v) {
  if (v <= kIq4Levels[0]) return 0;
  if (v >= kIq4Levels[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (v < kIq4Levels[mid] ? hi : lo) = mid;
  }
  return v - kIq4Levels[hi - 1] < kIq4Levels[hi] - v ? hi - 1 : hi;
}

// Of a sub-block of 32 (ggml's quantize_row_iq4_nl_impl, ntry 7, weights
// x^2): the scale that best fits its values to the levels, among the
// least-squares one for the first guess and for 15 guesses around it.
float iq4_sub_block_scale(const float* x) {
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  if (amax < kGroupMaxEps) return 0.0f;
  const auto fit = [&](float id, float& sumqx, float& sumq2) {
    sumqx = sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const float q = kIq4Levels[nearest_level(id * x[j])], w = x[j] * x[j];
      sumqx += w * q * x[j];
      sumq2 += w * q * q;
    }
  };
  float sumqx, sumq2;
  fit(1 / (-max / static_cast<float>(kIq4Levels[0])), sumqx, sumq2);
  float d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
  float best = d * sumqx;
  for (int itry = -7; itry <= 7; ++itry) {
    fit(static_cast<float>(itry + kIq4Levels[0]) / max, sumqx, sumq2);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

void quantize_iq4_xs_block(const float* x, std::byte* block) {
  float scales[8], max_scale = 0, amax_scale = 0;
  for (int ib = 0; ib < 8; ++ib) {
    scales[ib] = iq4_sub_block_scale(x + 32 * ib);
    if (std::fabs(scales[ib]) > amax_scale) {
      amax_scale = std::fabs(scales[ib]);
      max_scale = scales[ib];
    }
  }
  std::memset(block, 0, kIQ4_XSBlockBytes);
  const float d = -max_scale / 32;
  store_half(block, d);
  const float id = d != 0.0f ? 1 / d : 0.f;
  unsigned scales_h = 0;
  for (int ib = 0; ib < 8; ++ib) {
    const int l = std::max(-32, std::min(31, nearest_int(id * scales[ib])));
    const float dl = d * static_cast<float>(l);
    const float idl = dl != 0.0f ? 1 / dl : 0.f;
    std::byte* qs = block + 8 + 16 * ib;
    for (int j = 0; j < 16; ++j) {
      const int low = nearest_level(idl * x[32 * ib + j]), high = nearest_level(idl * x[32 * ib + 16 + j]);
      qs[j] = std::byte{u8(low | high << 4)};
    }
    block[4 + ib / 2] |= std::byte{u8(((l + 32) & 0xF) << (4 * (ib % 2)))};
    scales_h |= static_cast<unsigned>((l + 32) >> 4) << (2 * ib);
  }
  block[2] = std::byte{u8(static_cast<int>(scales_h & 0xFF))};
  block[3] = std::byte{u8(static_cast<int>(scales_h >> 8))};
}

template <std::size_t BlockBytes>
void quantize_super_blocks(std::byte* dst, const float* src, std::size_t n,
                           void (*quantize)(const float*, std::byte*)) {
  for (std::size_t b = 0; b < n / kSuperBlock; ++b) quantize(src + b * kSuperBlock, dst + b * BlockBytes);
}

}  // namespace

// One block of ggml's quantize_row_iq4_nl_impl with a single block of 32:
// the scale stored as is, the levels nearest x / scale.
void quantize_iq4_nl(std::byte* dst, const float* src, std::size_t n) {
  for (std::size_t b = 0; b < n / 32; ++b) {
    const float* x = src + 32 * b;
    std::byte* block = dst + b * kIQ4_NLBlockBytes;
    const float d = iq4_sub_block_scale(x);
    store_half(block, d);
    const float id = d != 0.0f ? 1 / d : 0.f;
    for (int j = 0; j < 16; ++j) {
      block[2 + j] = std::byte{u8(nearest_level(id * x[j]) | nearest_level(id * x[16 + j]) << 4)};
    }
  }
}

void quantize_q2_k(std::byte* dst, const float* src, std::size_t n) {
  quantize_super_blocks<kQ2_KBlockBytes>(dst, src, n, quantize_q2_k_block);
}
void quantize_q3_k(std::byte* dst, const float* src, std::size_t n) {
  quantize_super_blocks<kQ3_KBlockBytes>(dst, src, n, quantize_q3_k_block);
}
void quantize_q4_k(std::byte* dst, const float* src, std::size_t n) {
  quantize_super_blocks<kQ4_KBlockBytes>(dst, src, n, quantize_q4_k_block);
}
void quantize_q5_k(std::byte* dst, const float* src, std::size_t n) {
  quantize_super_blocks<kQ5_KBlockBytes>(dst, src, n, quantize_q5_k_block);
}
void quantize_q6_k(std::byte* dst, const float* src, std::size_t n) {
  quantize_super_blocks<kQ6_KBlockBytes>(dst, src, n, quantize_q6_k_block);
}
void quantize_iq4_xs(std::byte* dst, const float* src, std::size_t n) {
  quantize_super_blocks<kIQ4_XSBlockBytes>(dst, src, n, quantize_iq4_xs_block);
}

}  // namespace accord::cpu
