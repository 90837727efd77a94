// The matrix products of every weight type on every CPU path: the paths
// agree bit for bit (the canonical order of kernels/cpu/kernel_table.hpp),
// results do not change with threads or batch size, and each type computes
// what its definition says, checked against a double-precision reference.
#include "kernels/cpu/matmul.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/aligned.hpp"
#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/ops.hpp"
#include "kernels/cpu/quant.hpp"
#include "tests/support.hpp"

namespace accord::cpu {
namespace {

using test::bit_identical;
using test::random_floats;

using test::make_matrix;
using test::product;
using test::StoredMatrix;

// The types stored in blocks of 32 values (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL).
bool is_block(WeightType type) { return traits(type).block_values == 32; }

constexpr WeightType kTypes[] = {WeightType::f32, WeightType::f16, WeightType::q8_0, WeightType::q4_0};

// Shapes that reach every remainder: an odd number of 32-value blocks, a
// float tail past the 16 lanes, rows and tokens that do not fill a tile.
int cols_for(WeightType type) { return is_block(type) ? 96 : 173; }

TEST(Matmul, EveryPathGivesTheSameBitsForEveryType) {
  for (WeightType type : kTypes) {
    const int rows = 37, cols = cols_for(type);
    const StoredMatrix w = make_matrix(type, rows, cols, 7);
    for (int batch : {1, 3, 9}) {
      const auto x = random_floats(static_cast<std::size_t>(batch) * cols, 11);
      test::expect_every_path_gives_portables_bits(w.matrix, x, batch);
    }
  }
}

// A llama2.c file's F32 weights start 28 bytes past a cache line, and the
// vector paths may read such rows from aligned blocks (f32_row_streamed):
// a decode product gives the portable path's bits wherever its rows lie.
TEST(Matmul, F32RowsGiveTheSameBitsAtEveryOffsetFromACacheLine) {
  for (int cols : {768, 173, 32}) {
    const int rows = 9;
    const auto values = random_floats(static_cast<std::size_t>(rows) * cols, 5);
    const auto x = random_floats(static_cast<std::size_t>(cols), 6);
    AlignedVector<float> storage(values.size() + 16);
    for (int offset = 0; offset < 16; ++offset) {
      std::copy(values.begin(), values.end(), storage.begin() + offset);
      const Matrix w{WeightType::f32, reinterpret_cast<const std::byte*>(storage.data() + offset), rows, cols};
      std::vector<float> portable;
      {
        test::CpuPathScope scope(Isa::portable);
        ASSERT_TRUE(scope.ok());
        portable = product(w, x, 1, 1);
      }
      for (Isa isa : {Isa::avx2, Isa::avx512}) {
        test::CpuPathScope scope(isa);
        if (!scope.ok()) continue;  // this CPU lacks it
        EXPECT_TRUE(bit_identical(product(w, x, 1, 1), portable))
            << cols << " columns " << offset * 4 << " bytes past a cache line on " << to_string(isa);
      }
    }
  }
}

TEST(Matmul, ResultsDependNeitherOnThreadsNorOnBatchSize) {
  for (WeightType type : kTypes) {
    const int rows = 131, cols = cols_for(type), batch = 10;
    const StoredMatrix w = make_matrix(type, rows, cols, 3);
    const auto x = random_floats(static_cast<std::size_t>(batch) * cols, 4);
    const auto reference = product(w.matrix, x, batch, 1);
    for (int threads : {2, 3}) {
      EXPECT_TRUE(bit_identical(product(w.matrix, x, batch, threads), reference)) << to_string(type) << threads;
    }
    for (int t = 0; t < batch; ++t) {
      const std::vector<float> token(x.begin() + t * cols, x.begin() + (t + 1) * cols);
      const auto alone = product(w.matrix, token, 1, 1);
      EXPECT_EQ(0, std::memcmp(alone.data(), reference.data() + static_cast<std::size_t>(t) * rows,
                               alone.size() * sizeof(float)))
          << to_string(type) << " token " << t;
    }
  }
}

// A few rows at once (a serve batch, a speculative verification) take
// tiles of several tokens and tiles for the tokens left over; on every
// path each row of the result has the bits of that row multiplied alone on
// the portable path, for every type, at batch sizes that fill tiles and
// leave tails of every length. (Q4_K's, Q5_K's and Q6_K's values are
// read as stored on the x86 paths and unpacked on the portable one: the
// same integers.)
TEST(Matmul, FewRowsGiveTheBitsOfEachRowAloneOnEveryPath) {
  for (int t = 0; t < kWeightTypes; ++t) {
    const auto type = static_cast<WeightType>(t);
    const int rows = 37, cols = is_k_quant(type) ? 512 : cols_for(type), most = 33;
    const StoredMatrix w = make_matrix(type, rows, cols, 41);
    const auto x = random_floats(static_cast<std::size_t>(most) * cols, 42);
    std::vector<std::vector<float>> alone;
    {
      test::CpuPathScope scope(Isa::portable);
      ASSERT_TRUE(scope.ok());
      for (int token = 0; token < most; ++token) {
        alone.push_back(product(w.matrix, {x.begin() + token * cols, x.begin() + (token + 1) * cols}, 1, 1));
      }
    }
    for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512}) {
      test::CpuPathScope scope(isa);
      if (!scope.ok()) continue;  // this CPU lacks it
      for (int batch : {2, 3, 7, 8, 9, 16, 33}) {
        const auto out = product(w.matrix, {x.begin(), x.begin() + batch * cols}, batch, 1);
        for (int token = 0; token < batch; ++token) {
          EXPECT_EQ(0, std::memcmp(out.data() + static_cast<std::size_t>(token) * rows, alone[token].data(),
                                   alone[token].size() * sizeof(float)))
              << to_string(type) << " on " << to_string(isa) << ", batch " << batch << ", token " << token;
        }
      }
    }
  }
}

TEST(Matmul, AttentionKernelsFollowTheirDefinitionOnEveryPath) {
  // Shapes past four registers (64 floats), with a single register and a
  // float tail left; rows strided like a KV cache, in blocks of two
  // positions, read from position 1 on.
  const int n = 173, count = 7, first = 1;
  const std::size_t stride = 200;
  const auto rows = random_floats(stride * (first + count), 51);
  const auto x = random_floats(static_cast<std::size_t>(n), 52);
  const auto weights = random_floats(static_cast<std::size_t>(count), 53);
  const auto start = random_floats(static_cast<std::size_t>(n), 54);  // what the sum adds to
  const auto row = [&](int p) { return rows.data() + static_cast<std::size_t>(first + p) * stride; };
  std::vector<float> expected_sum(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    float s = start[i];
    for (int p = 0; p < count; ++p) s = std::fma(weights[p], row(p)[i], s);
    expected_sum[i] = s;
  }
  std::vector<float> expected_dots;
  {
    test::CpuPathScope scope(Isa::portable);
    ASSERT_TRUE(scope.ok());
    for (int p = 0; p < count; ++p) expected_dots.push_back(dot(row(p), x.data(), n));
  }
  std::vector<const std::byte*> blocks;
  for (std::size_t p = 0; p < first + count; p += 2)
    blocks.push_back(reinterpret_cast<const std::byte*>(&rows[p * stride]));
  const KvRows paged{blocks.data(), 0, stride * sizeof(float), 1};
  for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512}) {
    test::CpuPathScope scope(isa);
    if (!scope.ok()) continue;
    std::vector<float> sum = start, scores(static_cast<std::size_t>(count));
    kv_weighted_sum(KvElement::f32, weights.data(), paged, first, count, n, sum.data());
    kv_dots(KvElement::f32, paged, first, count, x.data(), n, scores.data());
    EXPECT_TRUE(bit_identical(sum, expected_sum)) << to_string(isa);
    EXPECT_TRUE(bit_identical(scores, expected_dots)) << to_string(isa);
  }
}

TEST(Matmul, AGroupOfProductsEqualsEachProductAlone) {
  // Mixed types and row counts that split chunks inside a product and
  // across the boundary between two.
  const int cols = 96, batch = 5;
  const StoredMatrix a = make_matrix(WeightType::q8_0, 37, cols, 21);
  const StoredMatrix b = make_matrix(WeightType::f32, 18, cols, 22);
  const StoredMatrix c = make_matrix(WeightType::q4_0, 53, cols, 23);
  const auto x = random_floats(static_cast<std::size_t>(batch) * cols, 24);
  for (int threads : {1, 3}) {
    std::vector<float> out_a(batch * 37), out_b(batch * 18), out_c(batch * 53);
    const Product group[] = {{out_a.data(), &a.matrix}, {out_b.data(), &b.matrix}, {out_c.data(), &c.matrix}};
    ThreadPool pool(threads);
    matmul_group(pool, x.data(), batch, cols, group);
    EXPECT_TRUE(bit_identical(out_a, product(a.matrix, x, batch, 1))) << threads;
    EXPECT_TRUE(bit_identical(out_b, product(b.matrix, x, batch, 1))) << threads;
    EXPECT_TRUE(bit_identical(out_c, product(c.matrix, x, batch, 1))) << threads;
  }
  ThreadPool pool(1);
  const StoredMatrix narrow = make_matrix(WeightType::f32, 4, 64, 25);
  std::vector<float> out(batch * 4);
  const Product mismatched[] = {{out.data(), &narrow.matrix}};
  EXPECT_THROW(matmul_group(pool, x.data(), batch, cols, mismatched), std::invalid_argument);
}

TEST(Matmul, GatedProductIsSiluOfTheGateTimesUp) {
  for (WeightType type : kTypes) {
    const int rows = 70, cols = cols_for(type), batch = 6;
    const StoredMatrix gate = make_matrix(type, rows, cols, 31);
    const StoredMatrix up = make_matrix(type, rows, cols, 32);
    const auto x = random_floats(static_cast<std::size_t>(batch) * cols, 33);
    auto expected = product(gate.matrix, x, batch, 1);
    silu_mul(expected.data(), product(up.matrix, x, batch, 1).data(), batch * rows);
    for (int threads : {1, 2, 3}) {
      std::vector<float> hidden(expected.size()), scratch(expected.size());
      ThreadPool pool(threads);
      gated_matmul(pool, hidden.data(), scratch.data(), x.data(), batch, gate.matrix, up.matrix);
      EXPECT_TRUE(bit_identical(hidden, expected)) << to_string(type) << ", threads " << threads;
    }
  }
  const StoredMatrix shorter = make_matrix(WeightType::f32, 69, 173, 34);
  const StoredMatrix gate = make_matrix(WeightType::f32, 70, 173, 35);
  std::vector<float> hidden(70), scratch(70);
  const auto x = random_floats(173, 36);
  ThreadPool pool(1);
  EXPECT_THROW(gated_matmul(pool, hidden.data(), scratch.data(), x.data(), 1, gate.matrix, shorter.matrix),
               std::invalid_argument);
}

// Products of slices of one batch (a mixture of experts' experts, each
// over the tokens routed to it) give what each gives of its slice alone,
// for every type a routed block's stacks come in, on any pool.
TEST(Matmul, SlicesOfOneBatchGiveWhatEachSliceGivesAlone) {
  constexpr WeightType types[] = {WeightType::f32, WeightType::q8_0, WeightType::q4_0, WeightType::q4_k,
                                  WeightType::q6_k};
  const TokenSlice slices[] = {{0, 3}, {3, 1}, {4, 5}};
  const int batch = 9, rows = 40;
  for (WeightType type : types) {
    const int cols = is_k_quant(type) ? 512 : cols_for(type);
    const auto x = random_floats(static_cast<std::size_t>(batch) * cols, 41);
    std::vector<StoredMatrix> gates, ups;
    std::vector<std::vector<float>> slice_x, expected_down, expected_hidden;
    for (std::size_t i = 0; i < std::size(slices); ++i) {
      gates.push_back(make_matrix(type, rows + static_cast<int>(i), cols, 42 + static_cast<unsigned>(i)));
      ups.push_back(make_matrix(type, rows + static_cast<int>(i), cols, 52 + static_cast<unsigned>(i)));
      const auto begin = x.begin() + static_cast<std::ptrdiff_t>(slices[i].first_token) * cols;
      slice_x.emplace_back(begin, begin + static_cast<std::ptrdiff_t>(slices[i].tokens) * cols);
      expected_down.push_back(product(gates[i].matrix, slice_x[i], slices[i].tokens, 1));
      expected_hidden.push_back(expected_down[i]);
      silu_mul(expected_hidden[i].data(), product(ups[i].matrix, slice_x[i], slices[i].tokens, 1).data(),
               static_cast<int>(expected_hidden[i].size()));
    }
    for (int threads : {1, 3}) {
      ThreadPool pool(threads);
      std::vector<std::vector<float>> down, hidden, scratch;
      std::vector<SliceProduct> products;
      std::vector<GatedSlice> gated;
      for (std::size_t i = 0; i < std::size(slices); ++i) {
        down.emplace_back(expected_down[i].size());
        hidden.emplace_back(expected_hidden[i].size());
        scratch.emplace_back(expected_hidden[i].size());
      }
      for (std::size_t i = 0; i < std::size(slices); ++i) {
        products.push_back({slices[i], &gates[i].matrix, down[i].data()});
        gated.push_back({slices[i], &gates[i].matrix, &ups[i].matrix, hidden[i].data(), scratch[i].data()});
      }
      matmul_slices(pool, x.data(), batch, cols, products);
      gated_matmul_slices(pool, x.data(), batch, cols, gated, GateActivation::silu);
      for (std::size_t i = 0; i < std::size(slices); ++i) {
        EXPECT_TRUE(bit_identical(down[i], expected_down[i])) << to_string(type) << ", slice " << i << ", " << threads;
        EXPECT_TRUE(bit_identical(hidden[i], expected_hidden[i]))
            << to_string(type) << ", slice " << i << ", " << threads;
      }
    }
  }
}

// What a row of the product must be: the float formats exactly, the block
// formats with the activations quantized as quantize_activations says.
double reference_dot(const Matrix& w, int row, const float* x) {
  std::vector<float> weights(static_cast<std::size_t>(w.cols));
  dequantize_row(w, row, weights.data());
  std::vector<float> input(x, x + w.cols);
  if (is_block(w.type)) {
    std::vector<std::int8_t> quants(input.size());
    std::vector<float> scales(input.size() / 32);
    quantize_activations(x, w.cols, quants.data(), scales.data());
    for (std::size_t i = 0; i < input.size(); ++i) input[i] = static_cast<float>(quants[i]) * scales[i / 32];
  }
  double sum = 0;
  for (int i = 0; i < w.cols; ++i) sum += static_cast<double>(weights[i]) * input[i];
  return sum;
}

TEST(Matmul, EveryTypeComputesItsDefinition) {
  for (WeightType type : kTypes) {
    const int rows = 19, cols = cols_for(type), batch = 5;
    const StoredMatrix w = make_matrix(type, rows, cols, 21);
    const auto x = random_floats(static_cast<std::size_t>(batch) * cols, 22);
    const auto out = product(w.matrix, x, batch, 2);
    for (int t = 0; t < batch; ++t) {
      for (int r = 0; r < rows; ++r) {
        const double expected = reference_dot(w.matrix, r, x.data() + static_cast<std::size_t>(t) * cols);
        EXPECT_NEAR(out[static_cast<std::size_t>(t) * rows + r], expected, 2e-5)
            << to_string(type) << " " << t << "," << r;
      }
    }
  }
}

// ggml's quantizer never writes -128, but a file may hold it: |-128| does
// not fit a signed byte, which the vector paths' sign tricks must survive.
TEST(Matmul, Q8_0WeightsOfMinusOneHundredTwentyEightAreExact) {
  StoredMatrix w = make_matrix(WeightType::q8_0, 4, 64, 5);
  for (std::size_t i = 2; i < w.bytes.size(); i += 3) {
    if (i % kQ8_0BlockBytes >= 2) w.bytes[i] = std::byte{0x80};
  }
  const auto x = random_floats(64, 6);
  const auto out = product(w.matrix, x, 1, 1);
  for (int r = 0; r < 4; ++r) EXPECT_NEAR(out[static_cast<std::size_t>(r)], reference_dot(w.matrix, r, x.data()), 2e-5);
}

TEST(Matmul, QuantizedActivationsRoundHalfAwayFromZeroAndSurviveNaN) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = 0.5f;
  x[2] = -0.5f;
  x[3] = -2.5f;
  x[4] = std::nanf("");
  std::vector<std::int8_t> quants(32);
  float scale = 0;
  quantize_activations(x.data(), 32, quants.data(), &scale);
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(quants[0], 127);
  EXPECT_EQ(quants[1], 1);
  EXPECT_EQ(quants[2], -1);
  EXPECT_EQ(quants[3], -3);
  EXPECT_EQ(quants[4], 0);
}

TEST(Matmul, QuantizedActivationsEqualStdRound) {
  const auto x = random_floats(32 * 64, 31);
  std::vector<std::int8_t> quants(x.size());
  std::vector<float> scales(x.size() / 32);
  quantize_activations(x.data(), static_cast<int>(x.size()), quants.data(), scales.data());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float scale = scales[i / 32];
    const float expected = std::round(x[i] * (1.0f / scale));
    ASSERT_EQ(quants[i], static_cast<std::int8_t>(expected)) << i;
  }
}

TEST(Matmul, PathsAreNamedAndRefusedClearly) {
  EXPECT_EQ(use_isa(to_string(active_isa())), "");
  EXPECT_NE(use_isa("sse9").find("unknown CPU path 'sse9' (paths: portable, avx2, avx512)"), std::string::npos);
  test::CpuPathScope scope(Isa::portable);
  EXPECT_TRUE(scope.ok());
  EXPECT_EQ(active_isa(), Isa::portable);
}

}  // namespace
}  // namespace accord::cpu
