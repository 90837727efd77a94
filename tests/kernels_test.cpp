#include "kernels/cpu/ops.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/quant.hpp"
#include "tests/support.hpp"

namespace accord::cpu {
namespace {

using test::bit_identical;
using test::random_floats;

TEST(Kernels, DotMatchesDoubleReferenceWithTails) {
  for (int n : {1, 7, 8, 9, 64, 173}) {
    const auto a = random_floats(static_cast<std::size_t>(n), 1);
    const auto b = random_floats(static_cast<std::size_t>(n), 2);
    double expected = 0;
    for (int i = 0; i < n; ++i) expected += static_cast<double>(a[i]) * b[i];
    EXPECT_NEAR(dot(a.data(), b.data(), n), expected, 1e-5) << "n " << n;
  }
}

TEST(Kernels, RmsnormNormalisesToUnitRootMeanSquare) {
  const std::vector<float> x = {1, -2, 3, -4};
  const std::vector<float> weight = {1, 1, 1, 2};
  std::vector<float> out(4);
  rmsnorm(out.data(), x.data(), weight.data(), 4, 0.0f);
  const float rms = std::sqrt((1 + 4 + 9 + 16) / 4.0f);
  EXPECT_FLOAT_EQ(out[0], 1 / rms);
  EXPECT_FLOAT_EQ(out[3], 2 * -4 / rms);
}

TEST(Kernels, RowOpsOnThePoolEqualTheirRowByRowDefinition) {
  const int rows = 11, n = 37;
  const auto x0 = random_floats(static_cast<std::size_t>(rows) * n, 41);
  const auto delta = random_floats(x0.size(), 42);
  const auto weight = random_floats(static_cast<std::size_t>(n), 43);
  std::vector<float> summed = x0, normed(x0.size());
  for (std::size_t i = 0; i < x0.size(); ++i) summed[i] += delta[i];
  for (int r = 0; r < rows; ++r) rmsnorm(&normed[r * n], &summed[r * n], weight.data(), n, 1e-5f);
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    std::vector<float> x = x0, out(x0.size());
    add_rmsnorm_rows(pool, x.data(), delta.data(), out.data(), weight.data(), rows, n, 1e-5f);
    EXPECT_TRUE(bit_identical(x, summed)) << threads;
    EXPECT_TRUE(bit_identical(out, normed)) << threads;
    std::vector<float> renormed(x0.size());
    rmsnorm_rows(pool, renormed.data(), summed.data(), weight.data(), rows, n, 1e-5f);
    EXPECT_TRUE(bit_identical(renormed, normed)) << threads;
    std::vector<float> added = x0;
    add_rows(pool, added.data(), delta.data(), rows, n);
    EXPECT_TRUE(bit_identical(added, summed)) << threads;
  }
}

TEST(Kernels, SoftmaxSumsToOneAndSurvivesLargeValues) {
  std::vector<float> x = {1000.0f, 1001.0f, 999.0f};
  softmax(x.data(), 3);
  EXPECT_NEAR(x[0] + x[1] + x[2], 1.0f, 1e-6);
  EXPECT_GT(x[1], x[0]);
  EXPECT_FALSE(std::isnan(x[2]));
}

TEST(Kernels, RopeAtPositionZeroIsIdentityAndPreservesNorm) {
  const int seq = 4, hs = 8;
  std::vector<float> cos(static_cast<std::size_t>(seq) * hs / 2), sin(cos.size());
  rope_tables(cos.data(), sin.data(), seq, hs, 10000.0f);
  auto v = random_floats(16, 5);
  const auto original = v;
  rope(v.data(), 2, hs, cos.data(), sin.data());
  EXPECT_TRUE(bit_identical(v, original));
  rope(v.data(), 2, hs, &cos[3 * hs / 2], &sin[3 * hs / 2]);
  for (int pair = 0; pair < 8; ++pair) {
    const float before = original[2 * pair] * original[2 * pair] + original[2 * pair + 1] * original[2 * pair + 1];
    const float after = v[2 * pair] * v[2 * pair] + v[2 * pair + 1] * v[2 * pair + 1];
    EXPECT_NEAR(before, after, 1e-5);
  }
  EXPECT_NE(v[0], original[0]);
}

TEST(Kernels, SiluMul) {
  std::vector<float> gate = {0.0f, 2.0f};
  const std::vector<float> up = {5.0f, 3.0f};
  silu_mul(gate.data(), up.data(), 2);
  EXPECT_FLOAT_EQ(gate[0], 0.0f);
  EXPECT_FLOAT_EQ(gate[1], 2.0f / (1.0f + std::exp(-2.0f)) * 3.0f);
}

TEST(Kernels, SiluMulIsWithinAFewUlpOfItsDefinitionEverywhere) {
  std::vector<float> gate, up;
  for (float g = -100.0f; g <= 100.0f; g += 0.0137f) gate.push_back(g);
  for (float g : {0.0f, -0.0f, 1e-30f, -1e-30f, 87.5f, -87.5f, 88.5f, -88.5f, 1e30f, -1e30f}) gate.push_back(g);
  up.assign(gate.size(), 1.0f);
  const std::vector<float> inputs = gate;
  {
    test::CpuPathScope scope(Isa::portable);
    ASSERT_TRUE(scope.ok());
    silu_mul(gate.data(), up.data(), static_cast<int>(gate.size()));
  }
  for (Isa isa : {Isa::avx2, Isa::avx512}) {  // vectorized, the same bits
    test::CpuPathScope scope(isa);
    if (!scope.ok()) continue;
    std::vector<float> on_path = inputs;
    silu_mul(on_path.data(), up.data(), static_cast<int>(on_path.size()));
    EXPECT_TRUE(bit_identical(on_path, gate)) << to_string(isa);
  }
  // Below -86 the exponential is clamped: silu is then under 1e-36, not 0.
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const double g = inputs[i];
    const double expected = g / (1.0 + std::exp(-g));
    EXPECT_NEAR(gate[i], expected, 4e-7 * std::fabs(expected) + 1e-36) << "silu(" << g << ")";
  }
  std::vector<float> nan_gate = {std::nanf("")};
  const std::vector<float> one = {1.0f};
  silu_mul(nan_gate.data(), one.data(), 1);
  EXPECT_TRUE(std::isnan(nan_gate[0]));
}

// Keys and values, (positions, kv_dim) each, laid out as a paged cache
// lays them out: blocks of 1 << shift positions, each holding its keys and
// then its values, every value as `element` (Q8_0 as the test's own
// reference quantizes it).
class PagedKv {
 public:
  PagedKv(const std::vector<float>& keys, const std::vector<float>& values, int kv_dim, int shift,
          KvElement element = KvElement::f32)
      : kv_dim_(kv_dim), shift_(shift), element_(element) {
    const int positions = static_cast<int>(keys.size()) / kv_dim, per_block = 1 << shift;
    const std::size_t row = kv_bytes(element, static_cast<std::size_t>(kv_dim));
    part_bytes_ = row * static_cast<std::size_t>(per_block);
    for (int b = 0; b * per_block < positions; ++b) {
      storage_.emplace_back(2 * part_bytes_);
      for (int r = 0; r < per_block && b * per_block + r < positions; ++r) {
        const auto at = static_cast<std::size_t>(b * per_block + r) * kv_dim;
        store(&keys[at], storage_.back().data() + r * row);
        store(&values[at], storage_.back().data() + part_bytes_ + r * row);
      }
    }
    for (const auto& block : storage_) blocks_.push_back(block.data());
  }

  KvView view() const { return {blocks_.data(), 0, part_bytes_, shift_, kv_dim_, element_}; }

 private:
  void store(const float* from, std::byte* to) const {
    if (element_ == KvElement::q8_0) {
      const std::vector<std::byte> blocks = test::q8_0_reference({from, static_cast<std::size_t>(kv_dim_)});
      std::memcpy(to, blocks.data(), blocks.size());
      return;
    }
    for (int i = 0; i < kv_dim_; ++i) {
      if (element_ == KvElement::f32) {
        std::memcpy(to + 4 * i, from + i, 4);
      } else {
        const std::uint16_t half = f32_to_f16(from[i]);
        std::memcpy(to + 2 * i, &half, 2);
      }
    }
  }

  int kv_dim_, shift_;
  KvElement element_;
  std::size_t part_bytes_ = 0;
  std::vector<std::vector<std::byte>> storage_;
  std::vector<const std::byte*> blocks_;
};

// `values` as a cache of `element` keeps them: rounded to F16, or Q8_0's
// groups read back (the test's reference).
std::vector<float> as_kept(const std::vector<float>& values, KvElement element) {
  if (element == KvElement::q8_0) return test::q8_0_reference_values(values);
  std::vector<float> kept = values;
  for (float& x : kept) x = f16_to_f32(f32_to_f16(x));
  return kept;
}

constexpr int kOneBlock = 7;  // a shift whose block (128 positions) holds every position of these tests

TEST(Kernels, AttentionOverOnePositionReturnsItsValue) {
  // With a single cached position the softmax weight is 1: out = value.
  const int hs = 4;
  const std::vector<float> q = random_floats(8, 6);                   // 2 heads
  const PagedKv kv(random_floats(4, 7), {1, 2, 3, 4}, 4, kOneBlock);  // 1 kv head
  std::vector<float> out(8);
  ThreadPool pool(2);
  attention(pool, out.data(), q.data(), kv.view(), 1, 0, 2, 1, hs);
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3, 4, 1, 2, 3, 4}));
}

TEST(Kernels, AttentionIsCausalAndBatchInvariant) {
  const int hs = 8, heads = 4, kv_heads = 2, positions = 6, kv_dim = kv_heads * hs;
  const auto keys = random_floats(static_cast<std::size_t>(positions) * kv_dim, 8);
  const PagedKv kv(keys, random_floats(keys.size(), 9), kv_dim, kOneBlock);
  const auto q = random_floats(static_cast<std::size_t>(positions) * heads * hs, 10);
  ThreadPool pool(2);
  std::vector<float> batched(q.size());
  attention(pool, batched.data(), q.data(), kv.view(), positions, 0, heads, kv_heads, hs);
  for (int t = 0; t < positions; ++t) {
    std::vector<float> single(static_cast<std::size_t>(heads) * hs);
    attention(pool, single.data(), q.data() + static_cast<std::size_t>(t) * heads * hs, kv.view(), 1, t, heads,
              kv_heads, hs);
    EXPECT_EQ(0, std::memcmp(single.data(), batched.data() + static_cast<std::size_t>(t) * heads * hs,
                             single.size() * sizeof(float)))
        << "position " << t;
  }
}

// A sliding window of w positions is attention over the last w cached
// positions alone: the same arithmetic on a shorter cache.
TEST(Kernels, AttentionWindowAttendsToTheLastPositionsOnly) {
  const int hs = 8, heads = 4, kv_heads = 2, positions = 9, kv_dim = kv_heads * hs, window = 4;
  const auto keys = random_floats(static_cast<std::size_t>(positions) * kv_dim, 11);
  const auto values = random_floats(keys.size(), 12);
  const auto q = random_floats(static_cast<std::size_t>(positions) * heads * hs, 13);
  ThreadPool pool(2);
  std::vector<float> windowed(q.size());
  const float divisor = std::sqrt(static_cast<float>(hs));
  attention(pool, windowed.data(), q.data(), PagedKv(keys, values, kv_dim, kOneBlock).view(), positions, 0,
            AttentionHeads{heads, kv_heads, hs, divisor, window});
  for (int t = 0; t < positions; ++t) {
    const auto from = static_cast<std::ptrdiff_t>(std::max(0, t - window + 1)) * kv_dim;
    const auto to = static_cast<std::ptrdiff_t>(t + 1) * kv_dim;
    const PagedKv last({keys.begin() + from, keys.begin() + to}, {values.begin() + from, values.begin() + to}, kv_dim,
                       kOneBlock);
    std::vector<float> alone(static_cast<std::size_t>(heads) * hs);
    attention(pool, alone.data(), q.data() + static_cast<std::size_t>(t) * heads * hs, last.view(), 1,
              static_cast<int>((to - from) / kv_dim) - 1, heads, kv_heads, hs);
    EXPECT_EQ(0, std::memcmp(alone.data(), windowed.data() + static_cast<std::size_t>(t) * heads * hs,
                             alone.size() * sizeof(float)))
        << "position " << t;
  }
}

// Attention over a paged cache: the bits do not depend on the block size,
// on the path, or, for an F16 or Q8_0 cache, on anything but the values it
// keeps (an F32 cache of the values rounded to F16, or of Q8_0's groups
// read back, gives the same bits); in accord's arithmetic and in ggml's.
// A head is 72 values, so heads begin inside Q8_0's groups of 32 and the
// products meet tails.
TEST(Kernels, AttentionBitsDependOnTheValuesNotOnBlocksOrPaths) {
  const int hs = 72, heads = 8, kv_heads = 4, positions = 70, kv_dim = kv_heads * hs;
  const auto keys = random_floats(static_cast<std::size_t>(positions) * kv_dim, 15);
  const auto values = random_floats(keys.size(), 16);
  const auto q = random_floats(static_cast<std::size_t>(positions) * heads * hs, 17);
  const KvElement kept_types[] = {KvElement::f16, KvElement::q8_0};
  ThreadPool pool(2);
  for (bool ggml : {false, true}) {
    const AttentionHeads shape{heads, kv_heads, hs, std::sqrt(static_cast<float>(hs)), 0, ggml};
    const auto run = [&](const PagedKv& kv) {
      std::vector<float> out(q.size());
      attention(pool, out.data(), q.data(), kv.view(), positions, 0, shape);
      return out;
    };
    const std::vector<float> f32 = run(PagedKv(keys, values, kv_dim, kOneBlock));
    std::vector<std::vector<float>> kept;
    for (KvElement element : kept_types) {
      kept.push_back(run(PagedKv(as_kept(keys, element), as_kept(values, element), kv_dim, kOneBlock)));
      EXPECT_FALSE(bit_identical(f32, kept.back())) << "the cache changes the values " << static_cast<int>(element);
    }
    for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512}) {
      test::CpuPathScope scope(isa);
      if (!scope.ok()) continue;
      for (int shift : {0, 2, 5}) {
        EXPECT_TRUE(bit_identical(run(PagedKv(keys, values, kv_dim, shift)), f32))
            << to_string(isa) << " ggml " << ggml << " blocks of " << (1 << shift);
        for (std::size_t e = 0; e < kept.size(); ++e) {
          EXPECT_TRUE(bit_identical(run(PagedKv(keys, values, kv_dim, shift, kept_types[e])), kept[e]))
              << to_string(isa) << " ggml " << ggml << " element " << static_cast<int>(kept_types[e]) << " blocks of "
              << (1 << shift);
        }
      }
    }
  }
}

TEST(Kernels, RopeNeoxRotatesTheHalvesOfEachHead) {
  const int hs = 8, heads = 2;
  auto v = random_floats(static_cast<std::size_t>(heads) * hs, 14);
  const auto before = v;
  const std::vector<float> cos = {0.5f, -1.0f, 0.25f, 1.0f}, sin = {0.75f, 0.0f, -0.5f, 0.125f};
  rope_neox(v.data(), heads, hs, cos.data(), sin.data());
  for (int h = 0; h < heads; ++h) {
    for (int j = 0; j < hs / 2; ++j) {
      const float a = before[h * hs + j], b = before[h * hs + j + hs / 2];
      EXPECT_EQ(v[h * hs + j], a * cos[j] - b * sin[j]);
      EXPECT_EQ(v[h * hs + j + hs / 2], a * sin[j] + b * cos[j]);
    }
  }
}

// ggml's tables: angle freq_scale * pos * s^j / factor_j with s^j taken by
// repeated multiplication; cos and sin scaled. Checked against that loop in double
// within float rounding, and at position 0 exactly.
TEST(Kernels, RopeTablesGgmlDivideByTheFactorsAndScale) {
  const int seq = 5, hs = 8;
  const std::vector<float> factors = {1.0f, 2.0f, 4.0f, 8.0f};
  std::vector<float> cos(seq * hs / 2), sin(cos.size());
  rope_tables_ggml(cos.data(), sin.data(), seq, hs, {500000.0f, factors.data(), 0.25f, 0.5f});
  for (int pos = 0; pos < seq; ++pos) {
    for (int j = 0; j < hs / 2; ++j) {
      const double angle = 0.25 * pos * std::pow(500000.0, -2.0 * j / hs) / factors[j];
      EXPECT_NEAR(cos[pos * hs / 2 + j], 0.5 * std::cos(angle), 4e-6) << pos << " " << j;
      EXPECT_NEAR(sin[pos * hs / 2 + j], 0.5 * std::sin(angle), 4e-6) << pos << " " << j;
    }
  }
  EXPECT_EQ(cos[0], 0.5f);
  EXPECT_EQ(sin[0], 0.0f);
}

// GELU's tanh form through F16 as ggml's CPU backend computes it: the input
// rounded to F16, the result too; 0 below -10, the identity above 10.
TEST(Kernels, GeluTanhMulRoundsThroughHalfPrecision) {
  std::vector<float> gate = {-12.0f, -10.0f, -1.2345f, -0.001f, 0.0f, 0.3f, 2.71828f, 9.99f, 10.0f, 11.5f};
  const std::vector<float> up = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2};
  const auto x = gate;
  gelu_tanh_mul(gate.data(), up.data(), static_cast<int>(gate.size()));
  for (std::size_t i = 0; i < x.size(); ++i) {
    float expected = x[i] >= 10.0f ? x[i] : 0.0f;
    if (x[i] > -10.0f && x[i] < 10.0f) {
      const double h = f16_to_f32(f32_to_f16(x[i]));
      const double gelu = 0.5 * h * (1.0 + std::tanh(0.7978845608028654 * h * (1.0 + 0.044715 * h * h)));
      expected = f16_to_f32(f32_to_f16(static_cast<float>(gelu)));
    }
    EXPECT_EQ(gate[i], expected * 2.0f) << "gelu(" << x[i] << ")";
  }
}

}  // namespace
}  // namespace accord::cpu
