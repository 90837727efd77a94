// The CUDA half of the backend seam in a build without nvcc: every call
// says so (stage_backend.hpp).
#include "runtime/model/stage_backend.hpp"

namespace accord {

namespace {

Error no_cuda() {
  return Error(ErrorCode::mechanism,
               "this accord was built without CUDA (nvcc was not found, or -DACCORD_CUDA=OFF): "
               "--backend cuda needs a build where nvcc exists");
}

}  // namespace

bool built_with_cuda() { return false; }

Status check_cuda_devices(std::span<const int>) { return no_cuda(); }

Result<std::unique_ptr<StageBackend>> make_cuda_stage(const Model&, const WeightScope&, int) { return no_cuda(); }

}  // namespace accord
