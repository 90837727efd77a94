#include "kernels/cpu/ops.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/matmul.hpp"
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

TEST(Kernels, AttentionOverOnePositionReturnsItsValue) {
  // With a single cached position the softmax weight is 1: out = value.
  const int hs = 4;
  const std::vector<float> q = random_floats(8, 6);     // 2 heads
  const std::vector<float> keys = random_floats(4, 7);  // 1 kv head
  const std::vector<float> values = {1, 2, 3, 4};
  std::vector<float> out(8);
  ThreadPool pool(2);
  attention(pool, out.data(), q.data(), {keys.data(), values.data(), 4}, 1, 0, 2, 1, hs);
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3, 4, 1, 2, 3, 4}));
}

TEST(Kernels, AttentionIsCausalAndBatchInvariant) {
  const int hs = 8, heads = 4, kv_heads = 2, positions = 6, kv_dim = kv_heads * hs;
  const auto keys = random_floats(static_cast<std::size_t>(positions) * kv_dim, 8);
  const auto values = random_floats(keys.size(), 9);
  const auto q = random_floats(static_cast<std::size_t>(positions) * heads * hs, 10);
  ThreadPool pool(2);
  std::vector<float> batched(q.size());
  attention(pool, batched.data(), q.data(), {keys.data(), values.data(), kv_dim}, positions, 0, heads, kv_heads, hs);
  for (int t = 0; t < positions; ++t) {
    std::vector<float> single(static_cast<std::size_t>(heads) * hs);
    attention(pool, single.data(), q.data() + static_cast<std::size_t>(t) * heads * hs,
              {keys.data(), values.data(), kv_dim}, 1, t, heads, kv_heads, hs);
    EXPECT_EQ(0, std::memcmp(single.data(), batched.data() + static_cast<std::size_t>(t) * heads * hs,
                             single.size() * sizeof(float)))
        << "position " << t;
  }
}

}  // namespace
}  // namespace accord::cpu
