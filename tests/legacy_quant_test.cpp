// Q4_1, Q5_0, Q5_1 and IQ4_NL, ggml's other blocks of 32 values: their
// layouts read as ggml's dequantize_row_* reads them (decoded here from
// ggml's formulas, not accord's), their products on every CPU path
// bit-identical to the portable one, exact on integers and equal to the dot
// of the dequantized weights with the 8-bit activations, and `accord
// convert` writing llama3 of the zoo byte for byte as llama-quantize does
// (tests/zoo/llama3-legacy-quants.json records its bytes' digests).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/matmul.hpp"
#include "runtime/io/digest.hpp"
#include "runtime/model/gguf.hpp"
#include "tests/support.hpp"

namespace accord::cpu {
namespace {

using test::make_matrix;
using test::product;
using test::random_floats;
using test::StoredMatrix;

constexpr WeightType kTypes[] = {WeightType::q4_1, WeightType::q5_0, WeightType::q5_1, WeightType::iq4_nl};

// ggml's kvalues_iq4nl.
constexpr int kIq4nlLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

std::uint32_t u32_at(const std::uint8_t* p) {
  return p[0] | p[1] << 8 | p[2] << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

// Value j of a block as ggml's dequantize_row_q4_1, _q5_0, _q5_1 and
// _iq4_nl compute it: every product here is exact in float (a 5-bit
// level, or IQ4_NL's 8-bit one, times an f16), so double gives its bits.
double value_of(WeightType type, const std::uint8_t* block, int j) {
  const double d = f16_to_f32(static_cast<std::uint16_t>(block[0] | block[1] << 8));
  const double m = f16_to_f32(static_cast<std::uint16_t>(block[2] | block[3] << 8));
  const auto nibble = [&](int qs) { return j < 16 ? block[qs + j] & 0xF : block[qs + j - 16] >> 4; };
  switch (type) {
    case WeightType::q4_1: return nibble(4) * d + m;
    case WeightType::q5_0: return ((nibble(6) | (u32_at(block + 2) >> j & 1) << 4) - 16.0) * d;
    case WeightType::q5_1: return (nibble(8) | (u32_at(block + 4) >> j & 1) << 4) * d + m;
    case WeightType::iq4_nl: return d * kIq4nlLevels[nibble(2)];
    default: break;
  }
  ADD_FAILURE() << "not a type of this test";
  return 0;
}

// Rows of random bytes with scale 1 and minimum -3 (f16 0x3C00, 0xC200):
// every value an integer.
StoredMatrix integer_matrix(WeightType type, int rows, int cols, unsigned seed) {
  StoredMatrix m;
  m.bytes.resize(static_cast<std::size_t>(rows) * row_bytes(type, static_cast<std::size_t>(cols)));
  std::mt19937 random(seed);
  for (std::byte& b : m.bytes) b = static_cast<std::byte>(random() & 0xFF);
  const std::size_t block_bytes = traits(type).block_bytes;
  for (std::size_t at = 0; at < m.bytes.size(); at += block_bytes) {
    m.bytes[at] = std::byte{0x00};
    m.bytes[at + 1] = std::byte{0x3C};
    if (type == WeightType::q4_1 || type == WeightType::q5_1) {
      m.bytes[at + 2] = std::byte{0x00};
      m.bytes[at + 3] = std::byte{0xC2};
    }
  }
  m.matrix = {type, m.bytes.data(), rows, cols};
  return m;
}

const std::uint8_t* block_of(const Matrix& w, int r, int b) {
  return reinterpret_cast<const std::uint8_t*>(w.row(r)) + static_cast<std::size_t>(b) * traits(w.type).block_bytes;
}

TEST(LegacyQuant, ValuesReadAsGgmlDequantizesThem) {
  for (WeightType type : kTypes) {
    const StoredMatrix w = make_matrix(type, 3, 96, 5);
    std::vector<float> row(96);
    for (int r = 0; r < 3; ++r) {
      dequantize_row(w.matrix, r, row.data());
      for (int i = 0; i < 96; ++i) {
        EXPECT_EQ(row[static_cast<std::size_t>(i)],
                  static_cast<float>(value_of(type, block_of(w.matrix, r, i / 32), i % 32)))
            << to_string(type) << " row " << r << " value " << i;
      }
    }
  }
}

// Integer weights against activations whose every block holds +-127, so
// each block's scale is 1 and its quants the values themselves: every sum
// and product is an exact integer, and so is the result.
TEST(LegacyQuant, IntegerBlocksGiveExactSums) {
  const int rows = 9, cols = 32 * 5, batch = 6;
  std::mt19937 random(17);
  std::vector<float> x(static_cast<std::size_t>(batch) * cols);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = i % 32 == 7 ? (i % 64 == 7 ? 127.0f : -127.0f) : static_cast<float>(static_cast<int>(random() % 255) - 127);
  }
  for (WeightType type : kTypes) {
    const StoredMatrix w = integer_matrix(type, rows, cols, 23);
    const auto out = product(w.matrix, x, batch, 2);
    for (int t = 0; t < batch; ++t) {
      for (int r = 0; r < rows; ++r) {
        double expected = 0;
        for (int i = 0; i < cols; ++i) {
          expected += value_of(type, block_of(w.matrix, r, i / 32), i % 32) * x[static_cast<std::size_t>(t) * cols + i];
        }
        EXPECT_EQ(out[static_cast<std::size_t>(t) * rows + r], expected) << to_string(type) << " " << t << "," << r;
      }
    }
  }
}

// What rounds is the float of each partial and scale product, two fmas per
// lane and block (one for the minimum's term) and the tree: a few units of
// 2^-24 of the terms' magnitudes. 1e-6 of the sum of |terms| bounds that;
// a wrong level, scale or minimum moves a result by far more.
TEST(LegacyQuant, EveryTypeComputesItsDefinition) {
  // x as its 8-bit form (quants times the block's scale) stands for it.
  const test::ActivationForm q8_0{32, quantize_activations};
  for (WeightType type : kTypes) {
    const int cols = 32 * 9, batch = 5;
    const StoredMatrix w = make_matrix(type, 19, cols, 21);
    test::expect_products_near_their_definition(w.matrix, random_floats(static_cast<std::size_t>(batch) * cols, 22),
                                                batch, q8_0);
  }
}

// An odd count of blocks, 37 rows, and batches past the tokens a row's
// pass serves at once (4) and past a pass of 64.
TEST(LegacyQuant, EveryPathGivesTheSameBitsForEveryType) {
  for (WeightType type : kTypes) {
    const int rows = 37, cols = 32 * 7;
    const StoredMatrix w = make_matrix(type, rows, cols, 7);
    for (int batch : {1, 3, 9, 67}) {
      const auto x = random_floats(static_cast<std::size_t>(batch) * cols, 11);
      test::expect_every_path_gives_portables_bits(w.matrix, x, batch);
      EXPECT_TRUE(test::bit_identical(product(w.matrix, x, batch, 3), product(w.matrix, x, batch, 1)));
    }
  }
}

// Blocks of several types in one pass (matmul_group) give each its own bits.
TEST(LegacyQuant, GroupedProductsEqualSingleOnes) {
  const int cols = 32 * 3, batch = 3;
  const auto x = random_floats(static_cast<std::size_t>(batch) * cols, 31);
  std::vector<StoredMatrix> weights;
  for (WeightType type : kTypes) weights.push_back(make_matrix(type, 17, cols, 9));
  weights.push_back(make_matrix(WeightType::q4_0, 17, cols, 9));
  std::vector<std::vector<float>> outs(weights.size(), std::vector<float>(static_cast<std::size_t>(batch) * 17));
  std::vector<Product> products;
  for (std::size_t i = 0; i < weights.size(); ++i) products.push_back({outs[i].data(), &weights[i].matrix});
  ThreadPool pool(2);
  matmul_group(pool, x.data(), batch, cols, products);
  for (std::size_t i = 0; i < weights.size(); ++i) {
    EXPECT_TRUE(test::bit_identical(outs[i], product(weights[i].matrix, x, batch, 1)))
        << to_string(weights[i].matrix.type);
  }
}

}  // namespace
}  // namespace accord::cpu

namespace accord {
namespace {

nlohmann::json legacy_references() {
  std::ifstream in(std::string(ACCORD_TESTS_DIR) + "/zoo/llama3-legacy-quants.json");
  EXPECT_TRUE(in) << "missing tests/zoo/llama3-legacy-quants.json";
  return in ? nlohmann::json::parse(in) : nlohmann::json::object();
}

// accord convert --type q4_1_mix (...) of the F32 original writes what
// llama-quantize wrote: the same type for every tensor, and the same bytes;
// and accord inspect counts the matrices of the type.
TEST(LegacyQuantZooF32, ConvertWritesLlamaQuantizesBytes) {
  const auto original = test::zoo_f32_dir() / "llama3-f32.gguf";
  ASSERT_TRUE(std::filesystem::exists(original)) << original;
  const nlohmann::json references = legacy_references();
  int files = 0;
  for (const auto& [name, reference] : references.items()) {
    if (name == "about") continue;
    ++files;
    test::TempDir dir;
    const std::string path = dir.file(name);
    const auto result = test::run_accord({"convert", "--in", original.string(), "--out", path, "--type",
                                          reference.at("convert_type").get<std::string>()});
    ASSERT_EQ(result.exit_code, 0) << result.output;
    const auto bytes = test::read_bytes(path);
    const auto file = gguf::parse(bytes, name);
    ASSERT_TRUE(file) << file.error().message();
    EXPECT_EQ(file->find("general.file_type")->as_int().value(), reference.at("file_type").get<int>()) << name;
    std::vector<const gguf::TensorInfo*> quantized;
    for (const gguf::TensorInfo& t : file->tensors) {
      if (t.type == gguf::TensorType::f32) continue;
      quantized.push_back(&t);
      const auto& others = reference.at("other_types");
      const std::string expected = others.contains(t.name) ? others.at(t.name).get<std::string>()
                                                           : reference.at("matrix_type").get<std::string>();
      EXPECT_EQ(gguf::to_string(t.type), expected) << name << ": " << t.name;
    }
    EXPECT_EQ(quantized.size(), 1u + 3 * 7) << name;
    std::sort(quantized.begin(), quantized.end(), [](auto* a, auto* b) { return a->name < b->name; });
    std::vector<std::byte> joined;
    for (const gguf::TensorInfo* t : quantized) {
      joined.insert(joined.end(), bytes.begin() + static_cast<std::ptrdiff_t>(t->offset),
                    bytes.begin() + static_cast<std::ptrdiff_t>(t->offset + t->bytes));
    }
    EXPECT_EQ(sha256_hex(joined), reference.at("tensor_sha256").get<std::string>()) << name;
    // accord inspect counts the type as llama-quantize's file holds it.
    const auto inspected = test::run_accord({"inspect", path});
    const std::string count = reference.at("matrix_type").get<std::string>() + " x" +
                              std::to_string(quantized.size() - reference.at("other_types").size());
    EXPECT_NE(inspected.output.find(count), std::string::npos) << count << " in\n" << inspected.output;
  }
  EXPECT_EQ(files, 4);
}

}  // namespace
}  // namespace accord
