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

// A shape where IQ4_NL's own rules apply (grouped-query attention of 4 and
// 16 layers), untied. The types llama-quantize chose, recorded from
// `make_zoo.py OUT 7 --one llama3 --dim 256 --layers 16 --heads 8
// --kv-heads 2 --hidden 512 --untied` then `llama-quantize llama3-f32.gguf
// OUT.gguf IQ4_NL 2` (and Q4_1, Q5_0; llama.cpp 0c1e570): output.weight
// Q6_K; IQ4_NL's attn_v Q5_K in every layer and ffn_down Q5_K in layers 0
// and 1; every other matrix, token_embd included, the file's type.
TEST(QuantMix, ChoosesLlamaQuantizesTypesOfTheBlocksOf32) {
  const MixedModel model{16, 8, 2, false};
  const struct {
    const char* mix;
    std::string base;
  } cases[] = {{"iq4_nl", "IQ4_NL"}, {"q4_1", "Q4_1"}, {"q5_0", "Q5_0"}, {"q5_1", "Q5_1"}};
  for (const auto& c : cases) {
    const auto mix = quant_mix(c.mix);
    ASSERT_TRUE(mix) << c.mix;
    EXPECT_EQ(gguf::to_string(mix_type(*mix, "output.weight", model)), "Q6_K") << c.mix;
    EXPECT_EQ(gguf::to_string(mix_type(*mix, "token_embd.weight", model)), c.base) << c.mix;
    for (int layer = 0; layer < 16; ++layer) {
      for (const std::string role : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}) {
        const std::string tensor = "blk." + std::to_string(layer) + "." + role + ".weight";
        const bool q5_k = c.base == "IQ4_NL" && (role == "attn_v" || (role == "ffn_down" && layer < 2));
        EXPECT_EQ(gguf::to_string(mix_type(*mix, tensor, model)), q5_k ? "Q5_K" : c.base) << c.mix << ": " << tensor;
      }
    }
  }
  EXPECT_EQ(file_type(*quant_mix("q4_1")), 3);
  EXPECT_EQ(file_type(*quant_mix("q5_0")), 8);
  EXPECT_EQ(file_type(*quant_mix("q5_1")), 9);
  EXPECT_EQ(file_type(*quant_mix("iq4_nl")), 25);
}

}  // namespace
}  // namespace accord
