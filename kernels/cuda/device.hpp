// The CUDA devices this process sees, for the CUDA backend (docs/gpu.md) and
// for `accord-cuda-check`. Plain C++: no CUDA header leaks into callers.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace accord::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  std::size_t memory_bytes = 0;
  int compute_major = 0;
  int compute_minor = 0;
};

// The devices, or why there are none: no driver, no device, or a driver
// older than the runtime this build links. `error` is empty when the list
// is usable (it may still be empty only when error says so).
struct DeviceQuery {
  std::vector<DeviceInfo> devices;
  std::string error;
};

DeviceQuery query_devices();

}  // namespace accord::cuda
