// llama-quantize's mixes (Q2_K, Q3_K_M, Q4_K_M, Q5_K_M, IQ4_XS, and Q4_1,
// Q5_0, Q5_1, IQ4_NL): which type each tensor of a dense llama model gets,
// as llama.cpp's llama_tensor_get_type chooses it (src/llama-quant.cpp)
// without an importance matrix or overrides. `accord convert --type q4_k_m`
// writes them.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "runtime/model/gguf.hpp"

namespace accord {

enum class QuantMix { q2_k, q3_k_m, q4_k_m, q5_k_m, iq4_xs, q4_1, q5_0, q5_1, iq4_nl };

// "q2_k", "q3_k_m", "q4_k_m", "q5_k_m", "iq4_xs", "q4_1", "q5_0", "q5_1",
// "iq4_nl" (llama-quantize's names, lower case); nullopt for any other.
std::optional<QuantMix> quant_mix(std::string_view name);
// llama.cpp's llama_ftype of a file of the mix (general.file_type).
int file_type(QuantMix mix);

// What the choice depends on.
struct MixedModel {
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  bool tied_output = false;  // token_embd serves as the output matrix too
};

// The type of matrix `tensor` (a GGUF name: token_embd.weight,
// output.weight, blk.N.attn_v.weight, ...) in `mix`.
gguf::TensorType mix_type(QuantMix mix, std::string_view tensor, const MixedModel& model);

}  // namespace accord
