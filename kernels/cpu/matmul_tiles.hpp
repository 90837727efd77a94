// The loops of every matmul path, written once over a vector type V that
// one instruction set implements (kernels_*.cpp). Internal to kernels/cpu.
//
// A tile computes R weight rows against T tokens with R * T accumulators,
// so each weight load serves T tokens and each activation load R rows.
// Every accumulator follows the canonical order of kernel_table.hpp.
//
// V provides: Vec (16 float lanes) and Quants (two blocks of 32 int8);
// zero(), load(const std::byte*) (16 floats), load_half(const std::byte*)
// (16 halves), store(float*, v), fma(a, b, c), mul(a, b), reduce(v) (the
// canonical tree), pair(lo, hi) (lanes 0-7 lo, 8-15 hi), half(h) (a half
// converted exactly) and half_pair(h0, h1) (two, as pair() lanes),
// quants(b0, b1) and nibbles(b0, b1) (Q8_0 values and Q4_0 nibbles, v + 8,
// of two blocks; a null second block reads as zeros), quant_pair(q) (two
// adjacent blocks), weight_side(w) (Q8_0 weights in the form partials()
// takes them, prepared once per weight row of a tile), Offsets and
// load_offsets(p) (16 int32 lanes of Activations::byte_offsets or
// nibble_offsets), partials(w, x, byte_offsets) (the 16 exact partial sums
// of Q8_0 as floats; a path whose weight side is w + 128 starts from the
// offsets, the others ignore them), nibble_partials(w, x, offsets) (those of
// Q4_0: sum (v + 8) x plus the offset, as floats), and the tile shapes
// kRows, kTokens (batches of 2 tokens or more) and kDecodeRows (one token).
//
// A batch of a few tokens (a serve step, a speculative verification) takes
// the same tiles as a prefill: each weight block is loaded and prepared
// once per tile of kTokens tokens, and the tokens left over take tiles of
// kTokens / 2, / 4, ..., so that 7 tokens cost (kTokens 4) a tile of 4, of
// 2 and of 1 rather than 7 passes over the weights.
//
// A decode step reads each weight once and waits on memory: one row at a
// time is one sequential stream the hardware prefetcher follows, where
// several short interleaved rows defeat it (on a Zen 4, Q8_0 110M decode
// ran at 134 tok/s with 8 rows per tile and 194 with 1).
//
// Each path's translation unit is compiled for its instruction set, so
// nothing here may be an inline function with external linkage: the linker
// could pick one copy for every path. Templates over V, whose types have
// internal linkage, are instantiated per path; builtins stand in for std::.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/attention_ggml.hpp"
#include "kernels/cpu/bf16_products.hpp"
#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/kquant_products.hpp"
#include "kernels/cpu/legacy_products.hpp"
#include "kernels/cpu/vector_math.hpp"

namespace accord::cpu::tiles {

// How each stored type reads: a template argument, so no loop branches on
// it. A row is whole units of kUnitValues values in kUnitBytes bytes.
struct F32Format {
  static constexpr bool kBlocks = false;
  static constexpr std::size_t kUnitValues = 1, kUnitBytes = 4;
  static const float* input(const Activations& x) { return x.values; }
  template <class V>
  static typename V::Vec load(const std::byte* row, int i) {
    return V::load(row + 4 * static_cast<std::size_t>(i));
  }
  template <class V>
  static float at(const std::byte* row, int i) {
    float f;
    __builtin_memcpy(&f, row + 4 * static_cast<std::size_t>(i), sizeof f);
    return f;
  }
};

struct F16Format {
  static constexpr bool kBlocks = false;
  static constexpr std::size_t kUnitValues = 1, kUnitBytes = 2;
  static const float* input(const Activations& x) { return x.values; }
  template <class V>
  static typename V::Vec load(const std::byte* row, int i) {
    return V::load_half(row + 2 * static_cast<std::size_t>(i));
  }
  template <class V>
  static float at(const std::byte* row, int i) {
    std::uint16_t h;
    __builtin_memcpy(&h, row + 2 * static_cast<std::size_t>(i), sizeof h);
    return V::half(h);
  }
};

// A Q8_0 cache's row (ops.hpp's KvElement::q8_0): value i lies in group
// i / kKvGroup, an F16 scale d and then the group's quants q; it reads as
// d * q, exactly, and only ever converted to F32 a head's row at a time
// (kv_dots, kv_weighted_sum, attend_ggml), for F32's arithmetic.
struct KvQ8Format {
  // Values [lead, lead + n) of `row` into to[0 .. n), one scale a group.
  // `to` is restrict: int8 quants may otherwise alias the floats written,
  // which keeps the compiler from vectorizing a group.
  template <class V>
  static void read(const std::byte* row, int lead, int n, float* __restrict to) {
    for (int i = 0; i < n;) {
      const int value = lead + i, in_group = value % kKvGroup;
      const int take = n - i < kKvGroup - in_group ? n - i : kKvGroup - in_group;
      const std::byte* group = row + kKvGroupBytes * static_cast<std::size_t>(value / kKvGroup);
      const float d = scale<V>(group);
      const auto* q = reinterpret_cast<const std::int8_t*>(group + 2);
      float* __restrict out = to + i;
      if (take == kKvGroup) {
        for (int j = 0; j < kKvGroup; ++j) out[j] = static_cast<float>(q[j]) * d;
      } else {
        for (int j = 0; j < take; ++j) out[j] = static_cast<float>(q[in_group + j]) * d;
      }
      i += take;
    }
  }

 private:
  template <class V>
  static float scale(const std::byte* group) {
    std::uint16_t d;
    __builtin_memcpy(&d, group, sizeof d);
    return V::half(d);
  }
};

// A block: its f16 scale, then its values.
struct Q8Format {
  static constexpr bool kBlocks = true;
  static constexpr std::size_t kBlockBytes = 2 + kBlock;
  static constexpr std::size_t kUnitValues = kBlock, kUnitBytes = kBlockBytes;
  static const std::int32_t* offsets(const Activations& x) { return x.byte_offsets; }
  template <class V>
  static typename V::WeightSide weights(const std::byte* b0, const std::byte* b1) {
    return V::weight_side(V::quants(reinterpret_cast<const std::int8_t*>(b0 + 2),
                                    b1 != nullptr ? reinterpret_cast<const std::int8_t*>(b1 + 2) : nullptr));
  }
  template <class V>
  static typename V::Vec partials(const typename V::WeightSide& w, const typename V::Quants& x,
                                  const typename V::Offsets& offsets) {
    return V::partials(w, x, offsets);
  }
};

// Its values are stored as v + 8, two 4-bit values to a byte.
struct Q4Format {
  static constexpr bool kBlocks = true;
  static constexpr std::size_t kBlockBytes = 2 + kBlock / 2;
  static constexpr std::size_t kUnitValues = kBlock, kUnitBytes = kBlockBytes;
  static const std::int32_t* offsets(const Activations& x) { return x.nibble_offsets; }
  template <class V>
  static typename V::Quants weights(const std::byte* b0, const std::byte* b1) {
    return V::nibbles(b0 + 2, b1 != nullptr ? b1 + 2 : nullptr);
  }
  template <class V>
  static typename V::Vec partials(const typename V::Quants& w, const typename V::Quants& x,
                                  const typename V::Offsets& offsets) {
    return V::nibble_partials(w, x, offsets);
  }
};

// Row r of w as Format stores it: kUnitBytes per kUnitValues values
// (Matrix::row, inlined: a tile asks for its rows every time).
template <class V, class Format>
const std::byte* row_of(const Matrix& w, int r) {
  const std::size_t row_bytes = static_cast<std::size_t>(w.cols) / Format::kUnitValues * Format::kUnitBytes;
  return w.data + static_cast<std::size_t>(r) * row_bytes;
}

// out[r] = reduce(column[r]) for the R accumulators of one token. A path
// may reduce four at once (V::reduce4): the same tree, with the shuffles
// and adds shared among four registers.
template <class V, int R>
void reduce_column(const typename V::Vec (&column)[R], float* out) {
  int r = 0;
  if constexpr (requires { V::reduce4(column, out); }) {
    for (; r + 4 <= R; r += 4) V::reduce4(column + r, out + r);
  }
  for (; r < R; ++r) out[r] = V::reduce(column[r]);
}

// The first n16 floats of an F32 row `shift` floats past a 64-byte boundary
// against x, as float_tile sums them, lane by lane in the same order; but
// every vector of the row except its first and last comes from the two
// aligned blocks that hold it (V::join), so that no load of the row spans
// two cache lines. n16 >= 2 * kLanes.
template <class V>
typename V::Vec f32_row_streamed(const std::byte* row, const float* x, int n16, int shift) {
  using Vec = typename V::Vec;
  const typename V::Index index = V::shift_index(shift);
  // The aligned block where the lanes from `lane` begin (lane >= kLanes: inside the row).
  const auto block_of = [&](int lane) { return row + 4 * static_cast<std::size_t>(lane - shift); };
  Vec acc = V::fma(V::load(row), V::load(reinterpret_cast<const std::byte*>(x)), V::zero());
  Vec lo = V::load_aligned(block_of(kLanes));
  int i = kLanes;
  for (; i + kLanes < n16; i += kLanes) {
    const Vec hi = V::load_aligned(block_of(i + kLanes));
    acc = V::fma(V::join(lo, index, hi), V::load(reinterpret_cast<const std::byte*>(x + i)), acc);
    lo = hi;
  }
  return V::fma(V::load(row + 4 * static_cast<std::size_t>(i)), V::load(reinterpret_cast<const std::byte*>(x + i)),
                acc);
}

// F32 and F16 rows against T tokens of n floats: out[t * token_step + r]
// receives row r against token t.
template <class V, class Format, int R, int T>
void float_tile(const std::byte* const (&rows)[R], const float* const (&tokens)[T], int n, float* out,
                std::size_t token_step) {
  using Vec = typename V::Vec;
  const int n16 = n - n % kLanes;
  Vec acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = V::zero();
  int i = 0;
  // A decode product's row off a cache line (a llama2.c file's are 28 bytes
  // past one) goes through f32_row_streamed where the path can join blocks.
  if constexpr (R == 1 && T == 1 && __is_same(Format, F32Format) && requires { V::join; }) {
    const auto offset = reinterpret_cast<std::uintptr_t>(rows[0]) % 64;
    if (offset != 0 && offset % 4 == 0 && n16 >= 2 * kLanes) {
      acc[0][0] = f32_row_streamed<V>(rows[0], tokens[0], n16, static_cast<int>(offset / 4));
      i = n16;
    }
  }
  for (; i < n16; i += kLanes) {
    Vec xv[T];
    for (int t = 0; t < T; ++t) xv[t] = V::load(reinterpret_cast<const std::byte*>(tokens[t] + i));
    for (int r = 0; r < R; ++r) {
      const Vec wv = Format::template load<V>(rows[r], i);
      for (int t = 0; t < T; ++t) acc[r][t] = V::fma(wv, xv[t], acc[r][t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    Vec column[R];
    for (int r = 0; r < R; ++r) column[r] = acc[r][t];
    float sums[R];
    reduce_column<V, R>(column, sums);
    for (int r = 0; r < R; ++r) {
      float s = sums[r];
      for (int k = n16; k < n; ++k) s = __builtin_fmaf(Format::template at<V>(rows[r], k), tokens[t][k], s);
      out[static_cast<std::size_t>(t) * token_step + r] = s;
    }
  }
}

// The same for R rows of w from row0 and T tokens of x from tok0.
template <class V, class Format, int R, int T>
void float_tile(const Matrix& w, const Activations& x, float* out, int row0, int tok0) {
  const std::byte* rows[R];
  const float* tokens[T];
  for (int r = 0; r < R; ++r) rows[r] = row_of<V, Format>(w, row0 + r);
  for (int t = 0; t < T; ++t) tokens[t] = Format::input(x) + static_cast<std::size_t>(tok0 + t) * w.cols;
  float_tile<V, Format, R, T>(rows, tokens, w.cols, out + static_cast<std::size_t>(tok0) * w.rows + row0,
                              static_cast<std::size_t>(w.rows));
}

// The f16 scales of blocks b0 and b1 (null: 0) as pair() lanes.
template <class V>
typename V::Vec block_scales(const std::byte* b0, const std::byte* b1) {
  std::uint16_t h0, h1 = 0;
  __builtin_memcpy(&h0, b0, sizeof h0);
  if (b1 != nullptr) __builtin_memcpy(&h1, b1, sizeof h1);
  return V::half_pair(h0, h1);
}

// Where a tile's tokens find their 8-bit form (Activations).
template <int T>
struct TokenQuants {
  const std::int8_t* quants[T];
  const float* scale_lanes[T];
  const std::int32_t* offsets[T];  // byte_offsets (Q8_0) or nibble_offsets (Q4_0)
};

// Blocks b and, when Pair, b + 1 of R rows against T tokens, into acc.
// Each row's blocks are loaded and prepared once (Format::weights) for the
// T tokens; the tokens' operands need no preparing (Q8_0's correction is
// in Activations::byte_offsets, Q4_0's in nibble_offsets).
template <class V, class Format, int R, int T, bool Pair>
void block_step(const std::byte* const* rows, const TokenQuants<T>& x, int b, typename V::Vec (&acc)[R][T]) {
  const std::size_t lanes_at = static_cast<std::size_t>(b / 2) * kLanes;
  // Unrolled, so that the sums stay in registers (GCC would otherwise
  // keep a loop over rows, and the sums in memory).
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const std::byte* b0 = rows[r] + Format::kBlockBytes * static_cast<std::size_t>(b);
    const std::byte* b1 = Pair ? b0 + Format::kBlockBytes : nullptr;
    const typename V::Vec wd = block_scales<V>(b0, b1);
    const auto wq = Format::template weights<V>(b0, b1);
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const std::int8_t* q = x.quants[t] + static_cast<std::size_t>(b) * kBlock;
      const typename V::Quants xq = Pair ? V::quant_pair(q) : V::quants(q, nullptr);
      const typename V::Vec xd = V::load(reinterpret_cast<const std::byte*>(x.scale_lanes[t] + lanes_at));
      const typename V::Offsets xo = V::load_offsets(x.offsets[t] + lanes_at);
      acc[r][t] = V::fma(V::mul(wd, xd), Format::template partials<V>(wq, xq, xo), acc[r][t]);
    }
  }
}

// Q8_0 and Q4_0 weights: R rows from row0 against T tokens from tok0.
template <class V, class Format, int R, int T>
void block_tile(const Matrix& w, const Activations& x, float* out, int row0, int tok0) {
  using Vec = typename V::Vec;
  const int blocks = w.cols / kBlock;
  const std::byte* rows[R];
  TokenQuants<T> tokens;
  for (int r = 0; r < R; ++r) rows[r] = row_of<V, Format>(w, row0 + r);
  for (int t = 0; t < T; ++t) {
    const std::size_t lanes = static_cast<std::size_t>(tok0 + t) * block_pairs(w.cols) * kLanes;
    tokens.quants[t] = x.quants + static_cast<std::size_t>(tok0 + t) * w.cols;
    tokens.scale_lanes[t] = x.scale_lanes + lanes;
    tokens.offsets[t] = Format::offsets(x) + lanes;
  }
  Vec acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = V::zero();
  int b = 0;
  for (; b + 2 <= blocks; b += 2) block_step<V, Format, R, T, true>(rows, tokens, b, acc);
  if (b < blocks) block_step<V, Format, R, T, false>(rows, tokens, b, acc);
  for (int t = 0; t < T; ++t) {
    Vec column[R];
    for (int r = 0; r < R; ++r) column[r] = acc[r][t];
    reduce_column<V, R>(column, out + static_cast<std::size_t>(tok0 + t) * w.rows + row0);
  }
}

template <class V, class Format, int R, int T>
void tile(const Matrix& w, const Activations& x, float* out, int row0, int tok0) {
  if constexpr (Format::kBlocks) {
    block_tile<V, Format, R, T>(w, x, out, row0, tok0);
  } else {
    float_tile<V, Format, R, T>(w, x, out, row0, tok0);
  }
}

// Tokens [tok_begin, tok_end) for the rows from row0: T at a time, then
// what is left in tiles of T / 2, T / 4, ..., 1.
template <class V, class Format, int R, int T>
void token_tiles(const Matrix& w, const Activations& x, float* out, int row0, int tok_begin, int tok_end) {
  int t = tok_begin;
  for (; t + T <= tok_end; t += T) tile<V, Format, R, T>(w, x, out, row0, t);
  if constexpr (T > 1) {
    if (t < tok_end) token_tiles<V, Format, R, T / 2>(w, x, out, row0, t, tok_end);
  }
}

template <class V, class Format, int R, int T>
void row_tiles(const Matrix& w, const Activations& x, float* out, int row_begin, int row_end, int tok_begin,
               int tok_end) {
  int r = row_begin;
  for (; r + R <= row_end; r += R) token_tiles<V, Format, R, T>(w, x, out, r, tok_begin, tok_end);
  for (; r < row_end; ++r) token_tiles<V, Format, 1, T>(w, x, out, r, tok_begin, tok_end);
}

// Activations of this many tokens stay in the L2 cache while a group of
// weight rows passes over them (64 x 2048 floats: 512 KiB).
inline constexpr int kTokensPerPass = 64;

template <class V, class Format>
void matmul_rows(const Matrix& w, const Activations& x, float* out, int row_begin, int row_end) {
  if (x.batch == 1) {
    row_tiles<V, Format, V::kDecodeRows, 1>(w, x, out, row_begin, row_end, 0, 1);
    return;
  }
  for (int t = 0; t < x.batch; t += kTokensPerPass) {
    const int end = t + kTokensPerPass < x.batch ? t + kTokensPerPass : x.batch;
    row_tiles<V, Format, V::kRows, V::kTokens>(w, x, out, row_begin, row_end, t, end);
  }
}

// out[i] = dot(row i, x) for i < count, rows `stride` bytes apart:
// attention's scores. The keys are few and short (a head), so several
// share a tile.
template <class V, class Format>
void dots(const std::byte* rows, std::size_t stride, int count, const float* x, int n, float* out) {
  constexpr int R = V::kRows;
  const float* const tokens[1] = {x};
  int i = 0;
  for (; i + R <= count; i += R) {
    const std::byte* block[R];
    for (int r = 0; r < R; ++r) block[r] = rows + static_cast<std::size_t>(i + r) * stride;
    float_tile<V, Format, R, 1>(block, tokens, n, out + i, 0);
  }
  for (; i < count; ++i) {
    const std::byte* one[1] = {rows + static_cast<std::size_t>(i) * stride};
    float_tile<V, Format, 1, 1>(one, tokens, n, out + i, 0);
  }
}

template <class V>
float dot(const float* a, const float* b, int n) {
  float out;
  dots<V, F32Format>(reinterpret_cast<const std::byte*>(a), 0, 1, b, n, &out);
  return out;
}

// y[i .. i + H * kLanes) of weighted_sum, held in H registers across positions.
template <class V, class Format, int H>
void weighted_columns(const float* weights, const std::byte* rows, std::size_t stride, int count, int i, float* y) {
  using Vec = typename V::Vec;
  Vec acc[H];
  for (int h = 0; h < H; ++h) acc[h] = V::load(reinterpret_cast<const std::byte*>(y + i + h * kLanes));
  for (int p = 0; p < count; ++p) {
    const Vec weight = V::pair(weights[p], weights[p]);
    const std::byte* row = rows + static_cast<std::size_t>(p) * stride;
    for (int h = 0; h < H; ++h) acc[h] = V::fma(weight, Format::template load<V>(row, i + h * kLanes), acc[h]);
  }
  for (int h = 0; h < H; ++h) V::store(y + i + h * kLanes, acc[h]);
}

// y[i] += the fmas of weights[p] * row p's value i for p < count, in
// order: attention's weighted sum of values. A head's outputs stay in
// registers across positions, four registers (64 floats) at a time.
template <class V, class Format>
void weighted_sum(const float* weights, const std::byte* rows, std::size_t stride, int count, int n, float* y) {
  int i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) weighted_columns<V, Format, 4>(weights, rows, stride, count, i, y);
  for (; i + kLanes <= n; i += kLanes) weighted_columns<V, Format, 1>(weights, rows, stride, count, i, y);
  for (; i < n; ++i) {
    float s = y[i];
    for (int p = 0; p < count; ++p) {
      s = __builtin_fmaf(weights[p], Format::template at<V>(rows + static_cast<std::size_t>(p) * stride, i), s);
    }
    y[i] = s;
  }
}

// Calls run(first row, index of that row from `first`, rows) for each
// stretch of rows [first, first + count) that lies in one block.
template <class Run>
void for_each_stretch(const KvRows& rows, int first, int count, Run run) {
  const int block = 1 << rows.block_shift;
  for (int p = first; p < first + count;) {
    const int to_block_end = block - (p & (block - 1)), left = first + count - p;
    const int stretch = left < to_block_end ? left : to_block_end;
    run(rows.row(p), p - first, stretch);
    p += stretch;
  }
}

// `count` rows of a head in a Q8_0 cache, `stride` bytes apart, the head's
// n values of each from `lead` on, converted exactly into F32 rows of n
// values, so that F32's products sum them in F32's order. The rows lie in
// the thread's own buffer, grown to the longest stretch seen (a decode
// step allocates nothing), until the thread's next call.
template <class V>
const std::byte* q8_rows_as_f32(const std::byte* rows, std::size_t stride, int count, int lead, int n) {
  thread_local std::vector<float> floats;
  const auto size = static_cast<std::size_t>(count) * static_cast<std::size_t>(n);
  if (floats.size() < size) floats.resize(size);
  const std::size_t head_start = kKvGroupBytes * static_cast<std::size_t>(lead / kKvGroup);
  const std::size_t head_bytes =
      kKvGroupBytes * static_cast<std::size_t>((lead % kKvGroup + n + kKvGroup - 1) / kKvGroup);
  for (int r = 0; r < count; ++r) {
    const std::byte* row = rows + static_cast<std::size_t>(r) * stride;
    float* to = floats.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(n);
    // Rows lie a whole row of every head apart, so each is a cache miss of
    // its own; asking for the row kAhead rows on while converting this one
    // keeps several in flight.
    constexpr int kAhead = 8;
    if (r + kAhead < count) {
      const std::byte* ahead = row + kAhead * stride + head_start;
      for (std::size_t b = 0; b < head_bytes; b += 64) __builtin_prefetch(ahead + b);
    }
    KvQ8Format::read<V>(row, lead, n, to);
  }
  return reinterpret_cast<const std::byte*>(floats.data());
}

// KernelTable::kv_dots.
template <class V, class Format>
void kv_dots(const KvRows& keys, int first, int count, const float* x, int n, float* out) {
  for_each_stretch(keys, first, count, [&](const std::byte* rows, int done, int stretch) {
    if constexpr (__is_same(Format, KvQ8Format)) {
      const std::byte* floats = q8_rows_as_f32<V>(rows, keys.stride, stretch, keys.lead, n);
      dots<V, F32Format>(floats, sizeof(float) * static_cast<std::size_t>(n), stretch, x, n, out + done);
    } else {
      dots<V, Format>(rows, keys.stride, stretch, x, n, out + done);
    }
  });
}

// KernelTable::kv_weighted_sum.
template <class V, class Format>
void kv_weighted_sum(const float* weights, const KvRows& values, int first, int count, int n, float* y) {
  for_each_stretch(values, first, count, [&](const std::byte* rows, int done, int stretch) {
    if constexpr (__is_same(Format, KvQ8Format)) {
      const std::byte* floats = q8_rows_as_f32<V>(rows, values.stride, stretch, values.lead, n);
      weighted_sum<V, F32Format>(weights + done, floats, sizeof(float) * static_cast<std::size_t>(n), stretch, n, y);
    } else {
      weighted_sum<V, Format>(weights + done, rows, values.stride, stretch, n, y);
    }
  });
}

// Rounds half away from zero into [-127, 127], exactly as std::round
// would, but without a library call per value, so the loop vectorizes:
// v - trunc(v) is exact for |v| < 2^23. NaN gives 0, so a non-finite
// activation cannot reach an undefined cast.
template <class V>
std::int8_t to_level(float v) {
  const float number = v == v ? v : 0.0f;  // a select, not a branch: the loop vectorizes
  const float clamped = number < -127.0f ? -127.0f : (number > 127.0f ? 127.0f : number);
  int level = static_cast<int>(clamped);
  const float fraction = clamped - static_cast<float>(level);
  level += static_cast<int>(fraction >= 0.5f) - static_cast<int>(fraction <= -0.5f);
  return static_cast<std::int8_t>(level);
}

// quantize_activations (matmul.hpp). Plain float arithmetic, which every
// path rounds alike; compiled per path so that the compiler vectorizes it
// for that path's registers. The largest magnitude is taken over the bits
// (a float's magnitude orders as its bits do), an integer maximum that
// vectorizes where a float one would not; NaN counts as 0.
template <class V>
void quantize(const float* x, int n, std::int8_t* quants, float* scales) {
  for (int b = 0; b < n / kBlock; ++b) {
    const float* block = x + static_cast<std::ptrdiff_t>(b) * kBlock;
    std::uint32_t amax_bits = 0;
    for (int j = 0; j < kBlock; ++j) {
      std::uint32_t bits;
      __builtin_memcpy(&bits, block + j, sizeof bits);
      bits &= 0x7fffffffu;
      bits = bits > 0x7f800000u ? 0u : bits;
      amax_bits = bits > amax_bits ? bits : amax_bits;
    }
    float amax;
    __builtin_memcpy(&amax, &amax_bits, sizeof amax);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    scales[b] = d;
    std::int8_t* out = quants + static_cast<std::ptrdiff_t>(b) * kBlock;
    for (int j = 0; j < kBlock; ++j) out[j] = to_level<V>(block[j] * id);
  }
}

template <class V>
KernelTable make_table() {
  return {{&matmul_rows<V, F32Format>, &matmul_rows<V, F16Format>, &matmul_rows<V, Q8Format>, &matmul_rows<V, Q4Format>,
           &bf16_rows<V>, &kquant_rows<V, kq::Q2K>, &kquant_rows<V, kq::Q3K>, &kquant_rows<V, kq::Q4K>,
           &kquant_rows<V, kq::Q5K>, &kquant_rows<V, kq::Q6K>, &kquant_rows<V, kq::IQ4XS>, &legacy_rows<V, Q4_1Blocks>,
           &legacy_rows<V, Q5_0Blocks>, &legacy_rows<V, Q5_1Blocks>, &legacy_rows<V, IQ4_NLBlocks>},
          &dot<V>,
          {&kv_dots<V, F32Format>, &kv_dots<V, F16Format>, &kv_dots<V, KvQ8Format>},
          {&kv_weighted_sum<V, F32Format>, &kv_weighted_sum<V, F16Format>, &kv_weighted_sum<V, KvQ8Format>},
          &quantize<V>,
          &silu_mul<V>,
          &silu_mul_ggml<V>,
          &attention_weights<V>,
          {&attend_ggml<V, F32Format>, &attend_ggml<V, F16Format>, &attend_ggml<V, KvQ8Format>}};
}

}  // namespace accord::cpu::tiles
