// The K-quants (Q2_K .. Q6_K), IQ4_XS and BF16: ggml's reference quantizers byte
// for byte (against the zoo's files, which llama-quantize wrote without an
// importance matrix from the F32 originals), and their matrix products on
// every CPU path, bit-identical to the portable one and equal to the dot
// of the dequantized weights with the Q8_K-dequantized activations.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/kquant.hpp"
#include "kernels/cpu/matmul.hpp"
#include "runtime/model/gguf.hpp"
#include "tests/support.hpp"

namespace accord::cpu {
namespace {

using test::bit_identical;
using test::random_floats;

constexpr WeightType kKQuants[] = {WeightType::q2_k, WeightType::q3_k, WeightType::q4_k,
                                   WeightType::q5_k, WeightType::q6_k, WeightType::iq4_xs};

using test::make_matrix;
using test::product;
using test::StoredMatrix;

// Three super-blocks (an odd count), 37 rows (no tile fills them), and
// batches of one token, fewer than 8, 8 or more (where llama.cpp would
// take other kernels) and past the 64 tokens a row keeps at once. BF16
// rows of 173 values (a tail past the last 64) and of 224.
TEST(KQuant, EveryPathGivesTheSameBitsForEveryType) {
  const std::pair<WeightType, int> types[] = {
      {WeightType::bf16, 173}, {WeightType::bf16, 224}, {WeightType::q2_k, 768}, {WeightType::q3_k, 768},
      {WeightType::q4_k, 768}, {WeightType::q5_k, 768}, {WeightType::q6_k, 768}, {WeightType::iq4_xs, 768}};
  for (const auto& [type, cols] : types) {
    const int rows = 37;
    const StoredMatrix w = make_matrix(type, rows, cols, 7);
    for (int batch : {1, 3, 9, 67}) {
      const auto x = random_floats(static_cast<std::size_t>(batch) * cols, 11);
      test::expect_every_path_gives_portables_bits(w.matrix, x, batch);
      EXPECT_TRUE(bit_identical(product(w.matrix, x, batch, 3), product(w.matrix, x, batch, 1)));
    }
  }
}

// The product sums exact integers per super-block; what rounds is the
// float of each integer and of each scale product, and one fma per
// super-block (and minimum): a few units of 2^-24 relative to the terms'
// magnitudes, summed over at most 6 roundings per super-block. 1e-6 of the
// sum of |terms| bounds that with a margin; a wrong integer (one level,
// one scale) moves a result by far more.
TEST(KQuant, EveryTypeComputesItsDefinition) {
  // x as its Q8_K form stands for it.
  const test::ActivationForm q8_k{static_cast<int>(kSuperBlock), [](const float* x, int n, std::int8_t* q, float* d) {
                                    std::vector<std::int16_t> sums(static_cast<std::size_t>(n) / 16);
                                    quantize_q8_k(x, static_cast<std::size_t>(n), q, d, sums.data());
                                  }};
  for (WeightType type : kKQuants) {
    const int cols = 512, batch = 5;
    const StoredMatrix w = make_matrix(type, 19, cols, 21);
    test::expect_products_near_their_definition(w.matrix, random_floats(static_cast<std::size_t>(batch) * cols, 22),
                                                batch, q8_k);
  }
}

// ggml's quantize_row_q8_K_ref: the value of largest magnitude maps to
// -127 (so a positive one flips every sign and the scale's), ties round to
// even, sums of 16.
TEST(KQuant, ActivationsTakeGgmlsQ8_KForm) {
  std::vector<float> x(256, 0.0f);
  x[0] = 127.0f;  // scale 1 / (-127 / 127) = -1
  x[1] = 0.5f;
  x[2] = 1.5f;
  x[3] = 2.5f;
  x[17] = -100.0f;
  x[255] = std::nanf("");  // neither the largest nor outside [-127, 127]
  std::vector<std::int8_t> q(256);
  float scale = 0;
  std::vector<std::int16_t> sums(16);
  quantize_q8_k(x.data(), x.size(), q.data(), &scale, sums.data());
  EXPECT_EQ(scale, -1.0f);
  EXPECT_EQ(q[0], -127);
  EXPECT_EQ(q[1], 0);
  EXPECT_EQ(q[2], -2);
  EXPECT_EQ(q[3], -2);
  EXPECT_EQ(q[17], 100);
  EXPECT_GE(q[255], -127);
  EXPECT_EQ(sums[0], -127 + 0 - 2 - 2);
  EXPECT_EQ(sums[1], 100);
}

TEST(KQuant, RowsOfPartSuperBlocksAreRefused) {
  const StoredMatrix w = make_matrix(WeightType::q4_k, 2, 256, 3);
  Matrix narrow = w.matrix;
  narrow.cols = 128;
  ThreadPool pool(1);
  std::vector<float> x(128), out(2);
  try {
    matmul(pool, out.data(), x.data(), narrow, 1);
    ADD_FAILURE() << "a Q4_K matrix of 128 columns was multiplied";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "matmul: a Q4_K matrix of 128 columns, not whole blocks");
  }
}

// The zoo's quantized llama3 files against the F32 original: every tensor
// of a type accord writes equals its own quantization of the original.
TEST(KQuant, QuantizersWriteLlamaQuantizesBytes) {
  const std::filesystem::path originals = test::zoo_f32_dir();
  ASSERT_FALSE(originals.empty());
  const auto f32_bytes = test::read_bytes((originals / "llama3-f32.gguf").string());
  auto f32 = gguf::parse(f32_bytes, "llama3-f32.gguf");
  ASSERT_TRUE(f32) << f32.error().message();
  std::map<std::string, int> compared;  // by type
  for (const char* name : {"llama3-Q4_K_M.gguf", "llama3-Q5_K_M.gguf", "llama3-Q6_K.gguf", "llama3-Q3_K_M.gguf",
                           "llama3-Q2_K.gguf", "llama3-BF16.gguf", "llama3-IQ4_XS.gguf"}) {
    const auto bytes = test::read_bytes((test::shared_dir() / "models" / "zoo" / name).string());
    auto file = gguf::parse(bytes, name);
    ASSERT_TRUE(file) << file.error().message();
    for (const gguf::TensorInfo& t : file->tensors) {
      if (t.type == gguf::TensorType::f32) continue;
      const gguf::TensorInfo* original = f32->tensor(t.name);
      ASSERT_NE(original, nullptr) << t.name;
      ASSERT_EQ(original->elements, t.elements) << t.name;
      std::vector<float> values(original->elements);
      std::memcpy(values.data(), f32_bytes.data() + original->offset, values.size() * sizeof(float));
      std::vector<std::byte> mine(t.bytes);
      quantize_values(gguf::weight_type(t.type), mine.data(), values.data(), values.size());
      EXPECT_EQ(0, std::memcmp(mine.data(), bytes.data() + t.offset, mine.size()))
          << name << ": " << t.name << " (" << gguf::to_string(t.type) << ")";
      ++compared[std::string(gguf::to_string(t.type))];
    }
  }
  for (const char* type : {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "BF16", "IQ4_XS"}) {
    EXPECT_GE(compared[type], 9) << type;  // each is the main type of a file, or of a third of the Q3_K_M one's
  }
}

}  // namespace
}  // namespace accord::cpu
