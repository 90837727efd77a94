// The AVX2 path (with FMA and F16C): the canonical order of
// kernel_table.hpp in two 8-lane registers, lanes 0-7 and 8-15.
// Compiled with -mavx2 -mfma -mf16c; run only where best_isa() allows.
#include "kernels/cpu/kernel_table.hpp"

#if defined(__x86_64__)
#include <immintrin.h>

#include "kernels/cpu/matmul_tiles.hpp"
#include "kernels/cpu/x86_blocks.hpp"

namespace accord::cpu {

namespace {

struct Avx2 {
  struct Vec {
    __m256 lo, hi;
  };
  struct Quants {
    __m256i lo, hi;
  };
  static constexpr int kRows = 2;
  static constexpr int kTokens = 2;
  static constexpr int kDecodeRows = 1;

  static Vec zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static Vec load(const std::byte* p) {
    const auto* f = reinterpret_cast<const float*>(p);
    return {_mm256_loadu_ps(f), _mm256_loadu_ps(f + 8)};
  }
  static void store(float* p, Vec v) {
    _mm256_storeu_ps(p, v.lo);
    _mm256_storeu_ps(p + 8, v.hi);
  }
  static float half(std::uint16_t h) { return _cvtsh_ss(h); }
  static Vec load_half(const std::byte* p) {
    return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)))};
  }
  static Vec half_pair(std::uint16_t lo, std::uint16_t hi) {
    return {_mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(lo))),
            _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(hi)))};
  }
  static Vec fma(Vec a, Vec b, Vec c) { return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)}; }
  static Vec mul(Vec a, Vec b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
  static float reduce(Vec v) {
    const __m256 s8 = _mm256_add_ps(v.lo, v.hi);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
  }
  static Vec pair(float lo, float hi) { return {_mm256_set1_ps(lo), _mm256_set1_ps(hi)}; }
  static Quants quants(const std::int8_t* b0, const std::int8_t* b1) { return {x86::block(b0), x86::block(b1)}; }
  static Quants quant_pair(const std::int8_t* p) { return quants(p, p + kBlock); }
  static Quants nibbles(const std::byte* b0, const std::byte* b1) { return {x86::nibbles(b0), x86::nibbles(b1)}; }
  // The operands as they come: partials() needs nothing prepared, nor
  // the token's byte offsets.
  using WeightSide = Quants;
  static Quants weight_side(const Quants& w) { return w; }
  // Sums of four adjacent products: |w| (unsigned) times x with w's sign,
  // in pairs (at most 2 * 128 * 127, no saturation), then pairs of pairs.
  static __m256 block_partials(__m256i w, __m256i x) {
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
  struct Offsets {
    __m256i lo, hi;
  };
  static Vec partials(const Quants& w, const Quants& x, const Offsets&) {
    return {block_partials(w.lo, x.lo), block_partials(w.hi, x.hi)};
  }
  // Q4_0's nibbles (v + 8, 0..15) are unsigned as stored: pairs of
  // products of at most 2 * 15 * 128, then the token's offsets, -8 sum x.
  static Offsets load_offsets(const std::int32_t* p) {
    return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)),
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 8))};
  }
  static __m256 block_nibble_partials(__m256i w, __m256i x, __m256i offsets) {
    const __m256i pairs = _mm256_maddubs_epi16(w, x);
    return _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)), offsets));
  }
  static Vec nibble_partials(const Quants& w, const Quants& x, const Offsets& offsets) {
    return {block_nibble_partials(w.lo, x.lo, offsets.lo), block_nibble_partials(w.hi, x.hi, offsets.hi)};
  }
  static void super_block_lanes(const std::int8_t* q, const std::int16_t* scale, const std::int8_t* x, int c0, int c1,
                                std::int32_t* lanes) {
    x86::super_block_lanes(q, scale, x, c0, c1, lanes);
  }
  static std::int32_t group_sum(const std::int16_t* a, const std::int16_t* b) { return x86::group_sum(a, b); }
  using Q4KBlock = x86::Q4KBlock;
  using Q5KBlock = x86::Q5KBlock;
  using Q6KBlock = x86::Q6KBlock;
};

}  // namespace

const KernelTable* avx2_kernels() {
  static const KernelTable table = tiles::make_table<Avx2>();
  return &table;
}

}  // namespace accord::cpu

#else

namespace accord::cpu {
const KernelTable* avx2_kernels() { return nullptr; }
}  // namespace accord::cpu

#endif
