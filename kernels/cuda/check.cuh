// CUDA error handling for accord's .cu files: every runtime call is
// checked, and a failure becomes an exception naming the call, which the
// host side turns into an Error at its boundary.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace accord::cuda {

class CudaFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    throw CudaFailure(std::string(call) + ": " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
  }
}

}  // namespace accord::cuda

#define ACCORD_CUDA_CHECK(call) ::accord::cuda::check((call), #call)
