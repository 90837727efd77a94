// The decoder architectures accord runs, each a small description of its
// tensors and arithmetic (docs/models.md): the GGUF reader takes the tensor
// names and hyper-parameter keys from it, and the forward pass the choices
// it makes, instead of either branching on an architecture's name.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace accord {

enum class Arch { llama, qwen2, qwen3, gemma3, phi3, qwen3moe };

// Which dimensions of a head RoPE rotates together: (2j, 2j + 1) as Llama
// does, or (j, j + head/2), GPT-NeoX's halves.
enum class RopeStyle { adjacent_pairs, neox_halves };

// The feed-forward's gate: SiLU (SwiGLU) or GELU's tanh form (GeGLU).
enum class Activation { silu, gelu_tanh };

// Per-pair RoPE frequency factors a file may hold (the angle of pair j is
// divided by factor j): none; Llama 3's `rope_freqs.weight`; LongRoPE's
// `rope_factors_long.weight` and `rope_factors_short.weight`, the long
// ones used when the context exceeds the original one.
enum class RopeFactors { none, frequencies, long_short };

// Whether the feed-forward is a mixture of experts (`ARCH.expert_count`
// experts, `ARCH.expert_used_count` of them routed to per token): never;
// when the file has experts (Llama's Mixtral); always.
enum class Experts { never, optional, always };

struct Architecture {
  Arch arch;
  std::string_view name;  // general.architecture, the prefix of its metadata keys
  RopeStyle rope;
  Activation activation;
  RopeFactors rope_factors;
  bool qkv_bias = false;          // blk.N.attn_{q,k,v}.bias, added to the projections
  bool qk_norm = false;           // blk.N.attn_{q,k}_norm: RMSNorm of each head of Q and K before RoPE
  bool post_norms = false;        // blk.N.post_attention_norm, post_ffw_norm: RMSNorm of each sublayer's output
  bool fused_qkv = false;         // blk.N.attn_qkv: Q's rows, then K's, then V's
  bool fused_gate_up = false;     // blk.N.ffn_up: the gate's rows, then the up projection's
  bool scaled_embedding = false;  // the embedding rows are multiplied by sqrt(dim)
  // Where 1/sqrt(head_dim) applies: to the queries before the scores (as
  // llama.cpp does for gemma3 and phi3), or to the scores.
  bool scale_queries = false;
  // Sliding-window attention (`ATTN.sliding_window`): layer l attends to
  // the last `window` positions unless l % period == period - 1, and its
  // RoPE base is sliding_rope_base. 0: every layer is global.
  int sliding_window_period = 0;
  float sliding_rope_base = 10000.0f;
  Experts experts = Experts::never;
  // An expert's width is `ARCH.expert_feed_forward_length` (else
  // feed_forward_length / experts used), as llama.cpp's qwen3moe reads it;
  // otherwise feed_forward_length.
  bool own_expert_width = false;
};

// The description of `arch`.
const Architecture& describe(Arch arch);

// The architecture named `name` (general.architecture), if accord runs it.
std::optional<Arch> find_architecture(std::string_view name);

// Whether `name` is a mixture-of-experts architecture accord does not run
// (refused by name: shared experts, other routers).
bool is_unsupported_mixture_of_experts(std::string_view name);

// "llama, qwen2, qwen3, gemma3, phi3, qwen3moe", for errors.
std::string supported_architectures();

}  // namespace accord
