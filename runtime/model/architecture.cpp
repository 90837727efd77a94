#include "runtime/model/architecture.hpp"

#include <array>

namespace accord {

namespace {

// What llama.cpp (build 0c1e570, src/models/*.cpp) builds for each.
Architecture llama() {
  return {.arch = Arch::llama,
          .name = "llama",
          .rope = RopeStyle::adjacent_pairs,
          .activation = Activation::silu,
          .rope_factors = RopeFactors::frequencies,
          .experts = Experts::optional};
}

Architecture qwen2() {
  return {.arch = Arch::qwen2,
          .name = "qwen2",
          .rope = RopeStyle::neox_halves,
          .activation = Activation::silu,
          .rope_factors = RopeFactors::none,
          .qkv_bias = true};
}

Architecture qwen3() {
  return {.arch = Arch::qwen3,
          .name = "qwen3",
          .rope = RopeStyle::neox_halves,
          .activation = Activation::silu,
          .rope_factors = RopeFactors::none,
          .qk_norm = true};
}

// Gemma 3: five sliding layers of every six; the sliding ones keep RoPE
// base 10000 whatever the global base.
Architecture gemma3() {
  return {.arch = Arch::gemma3,
          .name = "gemma3",
          .rope = RopeStyle::neox_halves,
          .activation = Activation::gelu_tanh,
          .rope_factors = RopeFactors::none,
          .qk_norm = true,
          .post_norms = true,
          .scaled_embedding = true,
          .scale_queries = true,
          .sliding_window_period = 6,
          .sliding_rope_base = 10000.0f};
}

// Phi-3: llama.cpp ignores its sliding window (a converter bug it works
// around), and so does accord.
Architecture phi3() {
  return {.arch = Arch::phi3,
          .name = "phi3",
          .rope = RopeStyle::neox_halves,
          .activation = Activation::silu,
          .rope_factors = RopeFactors::long_short,
          .fused_qkv = true,
          .fused_gate_up = true,
          .scale_queries = true};
}

// Qwen 3's attention with a routed feed-forward of narrower experts.
Architecture qwen3moe() {
  Architecture a = qwen3();
  a.arch = Arch::qwen3moe;
  a.name = "qwen3moe";
  a.experts = Experts::always;
  a.own_expert_width = true;
  return a;
}

const std::array<Architecture, 6>& all() {
  static const std::array<Architecture, 6> architectures = {llama(), qwen2(), qwen3(), gemma3(), phi3(), qwen3moe()};
  return architectures;
}

}  // namespace

const Architecture& describe(Arch arch) { return all()[static_cast<std::size_t>(arch)]; }

std::optional<Arch> find_architecture(std::string_view name) {
  for (const Architecture& a : all()) {
    if (a.name == name) return a.arch;
  }
  return std::nullopt;
}

bool is_unsupported_mixture_of_experts(std::string_view name) {
  for (std::string_view moe : {"qwen2moe", "mixtral", "phimoe", "olmoe", "deepseek2", "dbrx", "grok"}) {
    if (name == moe) return true;
  }
  return false;
}

std::string supported_architectures() {
  std::string names;
  for (const Architecture& a : all()) names += (names.empty() ? "" : ", ") + std::string(a.name);
  return names;
}

}  // namespace accord
