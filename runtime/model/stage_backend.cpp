#include "runtime/model/stage_backend.hpp"

namespace accord {

std::string to_string(const BackendChoice& choice) {
  if (choice.kind == BackendChoice::Kind::cpu) return "cpu";
  if (choice.devices.empty()) return "cuda:0";
  std::string text = "cuda:";
  for (int device : choice.devices) {
    if (text.back() != ':') text += ',';
    text += std::to_string(device);
  }
  return text;
}

Status check_backend(const BackendChoice& choice) {
  if (choice.kind == BackendChoice::Kind::cpu) {
    if (!choice.devices.empty()) return Error(ErrorCode::contract, "--devices needs --backend cuda");
    return {};
  }
  const std::vector<int> first_device{0};
  return check_cuda_devices(choice.devices.empty() ? first_device : choice.devices);
}

Result<std::unique_ptr<StageBackend>> make_stage(const Model& model, cpu::ThreadPool& pool, const WeightScope& scope,
                                                 const BackendChoice& choice, int rank) {
  if (choice.kind == BackendChoice::Kind::cuda) return make_cuda_stage(model, scope, choice.device_for(rank));
  return std::unique_ptr<StageBackend>(std::make_unique<CpuStage>(model, pool, scope.first_unit, scope.units));
}

}  // namespace accord
