#include "runtime/model/quant_mix.hpp"

#include <charconv>

namespace accord {

namespace {

using gguf::TensorType;

// llama.cpp's use_more_bits: the first and last eighth of the layers, and
// every third between.
bool use_more_bits(int layer, int n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

// N of "blk.N.<role>", and the role; layer -1 where the name has none.
struct TensorName {
  int layer = -1;
  std::string_view role;
};

TensorName parse_name(std::string_view tensor) {
  TensorName name{-1, tensor};
  if (!tensor.starts_with("blk.")) return name;
  const char* begin = tensor.data() + 4;
  const char* end = tensor.data() + tensor.size();
  const auto [next, error] = std::from_chars(begin, end, name.layer);
  if (error != std::errc() || next == end || *next != '.') return {-1, tensor};
  name.role = std::string_view(next + 1, static_cast<std::size_t>(end - next - 1));
  return name;
}

TensorType base_type(QuantMix mix) {
  switch (mix) {
    case QuantMix::q2_k: return TensorType::q2_k;
    case QuantMix::q3_k_m: return TensorType::q3_k;
    case QuantMix::q4_k_m: return TensorType::q4_k;
    case QuantMix::q5_k_m: return TensorType::q5_k;
    case QuantMix::iq4_xs: return TensorType::iq4_xs;
    case QuantMix::q4_1: return TensorType::q4_1;
    case QuantMix::q5_0: return TensorType::q5_0;
    case QuantMix::q5_1: return TensorType::q5_1;
    case QuantMix::iq4_nl: return TensorType::iq4_nl;
  }
  return TensorType::q4_k;
}

TensorType attn_v_type(QuantMix mix, int layer, const MixedModel& m) {
  switch (mix) {
    case QuantMix::q2_k: return m.n_heads >= 4 * m.n_kv_heads ? TensorType::q4_k : TensorType::q3_k;
    case QuantMix::q3_k_m: return layer < 2 ? TensorType::q5_k : TensorType::q4_k;
    case QuantMix::q4_k_m:
    case QuantMix::q5_k_m: return use_more_bits(layer, m.n_layers) ? TensorType::q6_k : base_type(mix);
    case QuantMix::iq4_xs:
    case QuantMix::iq4_nl: return m.n_heads >= 4 * m.n_kv_heads ? TensorType::q5_k : base_type(mix);
    case QuantMix::q4_1:
    case QuantMix::q5_0:
    case QuantMix::q5_1: break;
  }
  return base_type(mix);
}

TensorType ffn_down_type(QuantMix mix, int layer, const MixedModel& m) {
  switch (mix) {
    case QuantMix::q2_k: return TensorType::q3_k;
    case QuantMix::q3_k_m: return layer < m.n_layers / 16 ? TensorType::q5_k : TensorType::q4_k;
    case QuantMix::q4_k_m:
    case QuantMix::q5_k_m: return use_more_bits(layer, m.n_layers) ? TensorType::q6_k : base_type(mix);
    case QuantMix::iq4_xs:
    case QuantMix::iq4_nl: return layer < m.n_layers / 8 ? TensorType::q5_k : base_type(mix);
    case QuantMix::q4_1:
    case QuantMix::q5_0:
    case QuantMix::q5_1: break;
  }
  return base_type(mix);
}

TensorType attn_output_type(QuantMix mix) {
  switch (mix) {
    case QuantMix::q2_k: return TensorType::q3_k;
    case QuantMix::q3_k_m: return TensorType::q4_k;
    case QuantMix::q4_k_m:
    case QuantMix::q5_k_m:
    case QuantMix::iq4_xs:
    case QuantMix::q4_1:
    case QuantMix::q5_0:
    case QuantMix::q5_1:
    case QuantMix::iq4_nl: break;
  }
  return base_type(mix);
}

}  // namespace

std::optional<QuantMix> quant_mix(std::string_view name) {
  if (name == "q2_k") return QuantMix::q2_k;
  if (name == "q3_k_m") return QuantMix::q3_k_m;
  if (name == "q4_k_m") return QuantMix::q4_k_m;
  if (name == "q5_k_m") return QuantMix::q5_k_m;
  if (name == "iq4_xs") return QuantMix::iq4_xs;
  if (name == "q4_1") return QuantMix::q4_1;
  if (name == "q5_0") return QuantMix::q5_0;
  if (name == "q5_1") return QuantMix::q5_1;
  if (name == "iq4_nl") return QuantMix::iq4_nl;
  return std::nullopt;
}

int file_type(QuantMix mix) {
  switch (mix) {
    case QuantMix::q2_k: return 10;
    case QuantMix::q3_k_m: return 12;
    case QuantMix::q4_k_m: return 15;
    case QuantMix::q5_k_m: return 17;
    case QuantMix::iq4_xs: return 30;
    case QuantMix::q4_1: return 3;
    case QuantMix::q5_0: return 8;
    case QuantMix::q5_1: return 9;
    case QuantMix::iq4_nl: return 25;
  }
  return 0;
}

TensorType mix_type(QuantMix mix, std::string_view tensor, const MixedModel& model) {
  // The output matrix, and token_embd where it serves as the output too,
  // take Q6_K in every mix (llama.cpp's Q8_0 where its rows do not split
  // into the mix's blocks is not modelled: such rows fail as Q6_K's).
  if (tensor == "output.weight" || (tensor == "token_embd.weight" && model.tied_output)) return TensorType::q6_k;
  const TensorName name = parse_name(tensor);
  if (name.role == "attn_v.weight") return attn_v_type(mix, name.layer, model);
  if (name.role == "ffn_down.weight") return ffn_down_type(mix, name.layer, model);
  if (name.role == "attn_output.weight") return attn_output_type(mix);
  return base_type(mix);
}

}  // namespace accord
