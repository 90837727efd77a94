#include "runtime/model/stage_backend.hpp"

#include <iterator>
#include <string_view>

namespace accord {

int BackendChoice::device_for(int rank) const {
  const std::vector<int> used = used_devices();
  return used[static_cast<std::size_t>(rank) % used.size()];
}

std::string to_string(const BackendChoice& choice) {
  if (choice.kind == BackendChoice::Kind::cpu) return "cpu";
  std::string text = "cuda:";
  for (int device : choice.used_devices()) {
    if (text.back() != ':') text += ',';
    text += std::to_string(device);
  }
  return text;
}

namespace {

constexpr std::string_view kKvTypeNames[] = {"f32", "f16", "q8_0"};  // in KvType's order

cpu::KvElement kv_element(KvType type) {
  switch (type) {
    case KvType::f32: return cpu::KvElement::f32;
    case KvType::f16: return cpu::KvElement::f16;
    case KvType::q8_0: return cpu::KvElement::q8_0;
  }
  return cpu::KvElement::f32;
}

}  // namespace

std::string_view to_string(KvType type) { return kKvTypeNames[static_cast<int>(type)]; }

Result<KvType> parse_kv_type(std::string_view name) {
  for (int i = 0; i < static_cast<int>(std::size(kKvTypeNames)); ++i) {
    if (name == kKvTypeNames[i]) return static_cast<KvType>(i);
  }
  return Error(ErrorCode::contract, "unknown KV cache type '" + printable(name) + "' (f32, f16 or q8_0)");
}

std::uint64_t kv_position_bytes(const ModelConfig& config, KvType type) {
  return 2 * static_cast<std::uint64_t>(config.n_layers) *
         cpu::kv_bytes(kv_element(type), static_cast<std::size_t>(config.kv_dim()));
}

Status check_kv_type(const ModelConfig& config, KvType type) {
  if (type == KvType::q8_0 && config.kv_dim() % cpu::kKvGroup != 0) {
    return Error(ErrorCode::contract,
                 "--kv-type q8_0 stores keys and values in groups of 32, and this model's kv_dim " +
                     std::to_string(config.kv_dim()) + " is not a multiple of 32");
  }
  return {};
}

Status check_backend(const BackendChoice& choice) {
  if (choice.kind == BackendChoice::Kind::cpu) {
    if (!choice.devices.empty()) return Error(ErrorCode::contract, "--devices needs --backend cuda");
    return {};
  }
  return check_cuda_devices(choice.used_devices());
}

namespace {

// The CUDA forward pass (cuda_transformer.cu) is Llama's as accord always
// ran it: no other architecture, no experts, no RoPE factors, heads of
// dim / n_heads.
Status check_cuda_runs(const ModelConfig& c) {
  if (c.arch != Arch::llama) {
    return Error(ErrorCode::architecture, "the CUDA backend does not run architecture '" +
                                              std::string(c.architecture().name) + "'; use --backend cpu");
  }
  if (c.routed()) {
    return Error(ErrorCode::architecture,
                 "the CUDA backend does not run mixture-of-experts models ('llama' with experts); use --backend cpu");
  }
  if (c.rope_factors || c.rope_scale != 1.0f || c.rope_freq_scale != 1.0f || c.head_dim > 0) {
    return Error(ErrorCode::architecture,
                 "the CUDA backend does not run llama models with RoPE factors or scaling or a head width of their "
                 "own; use --backend cpu");
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<StageBackend>> make_stage(const Model& model, cpu::ThreadPool& pool, const WeightScope& scope,
                                                 const StageOptions& options, int rank) {
  if (options.backend.kind == BackendChoice::Kind::cuda) {
    if (Status runs = check_cuda_runs(model.config()); !runs) return runs.error();
    if (options.kv_type != KvType::f32) {
      return Error(ErrorCode::contract, "the CUDA backend keeps its keys and values in F32; --kv-type " +
                                            std::string(to_string(options.kv_type)) + " runs on the CPU");
    }
    return make_cuda_stage(model, scope, options.backend.device_for(rank));
  }
  if (Status fits = check_kv_type(model.config(), options.kv_type); !fits) return fits.error();
  return std::unique_ptr<StageBackend>(std::make_unique<CpuStage>(model, pool, scope.first_unit, scope.units,
                                                                  kv_element(options.kv_type), options.kv_pool));
}

}  // namespace accord
