#include "kernels/cuda/device.hpp"

#include <cuda_runtime.h>

namespace accord::cuda {

DeviceQuery query_devices() {
  DeviceQuery query;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    query.error =
        std::string("no usable CUDA device: ") + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")";
    return query;
  }
  if (count == 0) {
    query.error = "no CUDA device: the driver sees none";
    return query;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, i) != cudaSuccess) continue;
    query.devices.push_back({i, properties.name, properties.totalGlobalMem, properties.major, properties.minor});
  }
  if (query.devices.empty()) query.error = "no CUDA device answered a query of its properties";
  return query;
}

}  // namespace accord::cuda
