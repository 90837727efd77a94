// The AVX-512 path (F, BW, VL, VNNI): the canonical order of
// kernel_table.hpp in one 16-lane register; two quantized blocks per
// register, their partial sums by VPDPBUSD. Compiled with the AVX-512
// flags; run only where best_isa() allows.
#include "kernels/cpu/kernel_table.hpp"

#if defined(__x86_64__)
#include <immintrin.h>

#include "kernels/cpu/matmul_tiles.hpp"
#include "kernels/cpu/x86_blocks.hpp"

namespace accord::cpu {

namespace {

struct Avx512 {
  using Vec = __m512;
  using Quants = __m512i;
  static constexpr int kRows = 4;
  static constexpr int kTokens = 4;
  static constexpr int kDecodeRows = 1;

  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec load(const std::byte* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static float half(std::uint16_t h) { return _cvtsh_ss(h); }
  static Vec load_half(const std::byte* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static Vec half_pair(std::uint16_t lo, std::uint16_t hi) {
    const __m256i halves =
        _mm256_set_m128i(_mm_set1_epi16(static_cast<short>(hi)), _mm_set1_epi16(static_cast<short>(lo)));
    return _mm512_cvtph_ps(halves);
  }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  // Rows read from aligned blocks (f32_row_streamed): lanes `shift` to
  // shift + 15 of the two blocks lo and hi, one after the other.
  using Index = __m512i;
  static Index shift_index(int shift) {
    return _mm512_add_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                            _mm512_set1_epi32(shift));
  }
  static Vec load_aligned(const std::byte* p) { return _mm512_load_ps(p); }
  static Vec join(Vec lo, Index index, Vec hi) { return _mm512_permutex2var_ps(lo, index, hi); }
  static Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  static float reduce(Vec v) {
    const __m256 s8 =
        _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
  }
  // reduce() of four registers at once: each step adds the same lanes as
  // reduce() does (i + 8, i + 4, i + 2, i + 1), two or four registers to
  // one, so the shuffles and adds are shared.
  static void reduce4(const Vec* v, float* out) {
    // i + 8: a's and b's 8-lane sums side by side in ab, c's and d's in cd.
    const Vec ab = _mm512_add_ps(_mm512_shuffle_f32x4(v[0], v[1], 0x44), _mm512_shuffle_f32x4(v[0], v[1], 0xEE));
    const Vec cd = _mm512_add_ps(_mm512_shuffle_f32x4(v[2], v[3], 0x44), _mm512_shuffle_f32x4(v[2], v[3], 0xEE));
    // i + 4: a's 4-lane sums in 128-bit lane 0, b's in 1, c's in 2, d's in 3.
    const Vec s4 = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
    // i + 2, then i + 1, within each 128-bit lane; lane 0 of each holds the sum.
    const Vec s2 = _mm512_add_ps(s4, _mm512_shuffle_ps(s4, s4, 0x4E));
    const Vec s1 = _mm512_add_ps(s2, _mm512_shuffle_ps(s2, s2, 0xB1));
    const __m512i firsts = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
    _mm_storeu_ps(out, _mm512_castps512_ps128(_mm512_permutexvar_ps(firsts, s1)));
  }
  static Vec pair(float lo, float hi) {
    const __m512d low = _mm512_castps_pd(_mm512_set1_ps(lo));
    return _mm512_castpd_ps(_mm512_insertf64x4(low, _mm256_castps_pd(_mm256_set1_ps(hi)), 1));
  }
  static Quants quants(const std::int8_t* b0, const std::int8_t* b1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(x86::block(b0)), x86::block(b1), 1);
  }
  static Quants quant_pair(const std::int8_t* p) { return _mm512_loadu_si512(p); }
  // Both blocks' nibbles split at once: low ones [b0 | b1], high ones
  // [b0 | b1], then the 128-bit lanes reordered to b0 low, b0 high, b1
  // low, b1 high (values 0-15, 16-31 of each block).
  static Quants nibbles(const std::byte* b0, const std::byte* b1) {
    const __m128i p0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b0));
    const __m128i p1 = b1 != nullptr ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1)) : _mm_setzero_si128();
    const __m256i packed = _mm256_set_m128i(p1, p0);
    const __m256i mask = _mm256_set1_epi8(0x0F);
    const __m256i low = _mm256_and_si256(packed, mask), high = _mm256_and_si256(_mm256_srli_epi16(packed, 4), mask);
    const __m512i halves = _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
    return _mm512_shuffle_i64x2(halves, halves, _MM_SHUFFLE(3, 1, 2, 0));
  }
  // VPDPBUSD adds four products of unsigned by signed bytes to each 32-bit
  // lane. Q8_0's weights become unsigned by an offset of 128 (w ^ 0x80),
  // once per row of a tile, and the products start from the token's
  // offsets, -128 times its sums of four, so the offset cancels exactly:
  // sum (w + 128) x - 128 sum x = sum w x, in 32 bits. Q4_0's nibbles
  // (v + 8, 0..15) are unsigned as stored; their products start from -8 sum x.
  using WeightSide = Quants;
  static WeightSide weight_side(Quants w) { return _mm512_xor_si512(w, _mm512_set1_epi8(-128)); }
  using Offsets = __m512i;
  static Offsets load_offsets(const std::int32_t* p) { return _mm512_loadu_si512(p); }
  static Vec partials(WeightSide w, Quants x, Offsets offsets) {
    return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(offsets, w, x));
  }
  static Vec nibble_partials(Quants w, Quants x, Offsets offsets) {
    return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(offsets, w, x));
  }
  // K-quants: the AVX2 sums (x86_blocks.hpp).
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

const KernelTable* avx512_kernels() {
  static const KernelTable table = tiles::make_table<Avx512>();
  return &table;
}

}  // namespace accord::cpu

#else

namespace accord::cpu {
const KernelTable* avx512_kernels() { return nullptr; }
}  // namespace accord::cpu

#endif
