// llama-quantize's mixes: the type each tensor of the zoo's llama3 files
// got from llama.cpp's llama_tensor_get_type is the type mix_type chooses.
#include "runtime/model/quant_mix.hpp"

#include <gtest/gtest.h>

#include <string>

#include "tests/support.hpp"

namespace accord {
namespace {

int metadata_int(const gguf::File& file, const std::string& key) {
  const gguf::Value* value = file.find(key);
  EXPECT_NE(value, nullptr) << key;
  return value != nullptr ? static_cast<int>(value->as_int().value()) : 0;
}

TEST(QuantMix, ChoosesLlamaQuantizesTypeForEveryTensor) {
  const struct {
    const char* file;
    const char* mix;
  } cases[] = {{"llama3-Q4_K_M.gguf", "q4_k_m"},
               {"llama3-Q5_K_M.gguf", "q5_k_m"},
               {"llama3-Q3_K_M.gguf", "q3_k_m"},
               {"llama3-Q2_K.gguf", "q2_k"},
               {"llama3-IQ4_XS.gguf", "iq4_xs"}};
  for (const auto& c : cases) {
    const auto bytes = test::read_bytes((test::shared_dir() / "models" / "zoo" / c.file).string());
    const auto file = gguf::parse(bytes, c.file);
    ASSERT_TRUE(file) << file.error().message();
    const MixedModel model{metadata_int(*file, "llama.block_count"), metadata_int(*file, "llama.attention.head_count"),
                           metadata_int(*file, "llama.attention.head_count_kv"),
                           file->tensor("output.weight") == nullptr};
    const auto mix = quant_mix(c.mix);
    ASSERT_TRUE(mix);
    EXPECT_EQ(file_type(*mix), metadata_int(*file, "general.file_type")) << c.file;
    int matrices = 0;
    for (const gguf::TensorInfo& t : file->tensors) {
      if (t.shape.size() < 2) continue;  // norms and rope_freqs stay F32
      ++matrices;
      EXPECT_EQ(gguf::to_string(mix_type(*mix, t.name, model)), gguf::to_string(t.type)) << c.file << ": " << t.name;
    }
    EXPECT_EQ(matrices, 1 + 3 * 7) << c.file;
  }
  EXPECT_FALSE(quant_mix("q4_k_s"));
}

}  // namespace
}  // namespace accord
