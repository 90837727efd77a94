// F16, Q8_0 and Q4_0 conversion: exact half-precision rounding and the
// per-value error bounds docs/gguf.md builds the model tolerances on.
#include "kernels/cpu/quant.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace accord::cpu {
namespace {

TEST(Quant, HalfPrecisionRoundsToNearestEven) {
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);         // largest half
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);         // rounds up to infinity
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3C00);  // a tie goes to even
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-10f + 0x1p-11f), 0x3C02);
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(0x1p-26f), 0x0000);
  EXPECT_EQ(f32_to_f16(INFINITY), 0x7C00);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
  // Every half value survives the round trip through float.
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << h;
  }
}

std::vector<float> random_values(std::size_t n, float scale) {
  std::mt19937 random(7);
  std::uniform_real_distribution<float> uniform(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = uniform(random);
  return v;
}

// Quantizes and dequantizes `x` and returns each value's error divided by
// the largest magnitude of its block.
template <class Quantize, class Dequantize>
double worst_relative_error(const std::vector<float>& x, std::size_t block_bytes, Quantize q, Dequantize d) {
  std::vector<std::byte> stored(x.size() / kQuantBlock * block_bytes);
  std::vector<float> back(x.size());
  q(stored.data(), x.data(), x.size());
  d(back.data(), stored.data(), x.size());
  double worst = 0;
  for (std::size_t b = 0; b < x.size() / kQuantBlock; ++b) {
    float amax = 0;
    for (std::size_t j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(x[b * kQuantBlock + j]));
    for (std::size_t j = 0; j < kQuantBlock; ++j) {
      const std::size_t i = b * kQuantBlock + j;
      worst = std::max(worst, std::fabs(double(back[i]) - x[i]) / amax);
    }
  }
  return worst;
}

TEST(Quant, Q8_0ErrorIsHalfAStepOfTheBlockMaximum) {
  const auto x = random_values(32 * 200, 3.0f);
  const double worst = worst_relative_error(x, kQ8_0BlockBytes, quantize_q8_0, dequantize_q8_0);
  // Half a step of amax/127, plus the F16 rounding of the scale (127 steps
  // times a relative 2^-11).
  EXPECT_LE(worst, 0.5 / 127 + 127.0 / 127 * 0x1p-11);
  EXPECT_GT(worst, 0.3 / 127);
}

TEST(Quant, Q4_0ErrorIsAtMostAStepOfTheBlockMaximum) {
  const auto x = random_values(32 * 200, 0.5f);
  const double worst = worst_relative_error(x, kQ4_0BlockBytes, quantize_q4_0, dequantize_q4_0);
  EXPECT_LE(worst, 1.0 / 8 + 8.0 / 8 * 0x1p-11);
}

TEST(Quant, F16KeepsElevenSignificantBits) {
  const auto x = random_values(1000, 100.0f);
  std::vector<std::byte> stored(x.size() * 2);
  std::vector<float> back(x.size());
  quantize_f16(stored.data(), x.data(), x.size());
  dequantize_f16(back.data(), stored.data(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_LE(std::fabs(back[i] - x[i]), std::fabs(x[i]) * 0x1p-11f) << i;
}

TEST(Quant, BlocksAreStoredAsGgmlStoresThem) {
  std::vector<float> x(32);
  for (std::size_t j = 0; j < 32; ++j) x[j] = static_cast<float>(j) - 16.0f;  // -16 .. 15
  std::vector<std::byte> q8(kQ8_0BlockBytes), q4(kQ4_0BlockBytes);
  quantize_q8_0(q8.data(), x.data(), 32);
  std::uint16_t scale;
  std::memcpy(&scale, q8.data(), 2);
  EXPECT_EQ(scale, f32_to_f16(16.0f / 127.0f));
  EXPECT_EQ(static_cast<std::int8_t>(q8[2]), -127);  // -16 is the block's largest magnitude
  quantize_q4_0(q4.data(), x.data(), 32);
  std::memcpy(&scale, q4.data(), 2);
  EXPECT_EQ(scale, f32_to_f16(2.0f));                // d = max / -8 with max = -16
  EXPECT_EQ(std::to_integer<int>(q4[2]) & 0x0F, 0);  // -16 / 2 + 8 = level 0
  EXPECT_EQ(std::to_integer<int>(q4[2]) >> 4, 8);    // x[16] = 0 -> level 8
  // Non-finite input does not reach an undefined cast.
  x[3] = NAN;
  quantize_q8_0(q8.data(), x.data(), 32);
  quantize_q4_0(q4.data(), x.data(), 32);
}

}  // namespace
}  // namespace accord::cpu
