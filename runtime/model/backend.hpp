// Where a session computes: the backend of `--backend` and `--devices`,
// and the weights budget of `--max-resident-bytes`. The stages themselves
// are stage_backend.hpp's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/error.hpp"

namespace accord {

// Which backend a session's ranks use: `--backend` and `--devices`.
struct BackendChoice {
  enum class Kind { cpu, cuda };
  Kind kind = Kind::cpu;
  // cuda: rank r computes on devices[r % devices.size()] (ranks may share
  // one); empty: device 0.
  std::vector<int> devices;

  // The devices the ranks use: `devices`, or device 0 when none are listed.
  std::vector<int> used_devices() const { return devices.empty() ? std::vector<int>{0} : devices; }
  int device_for(int rank) const;
  bool operator==(const BackendChoice&) const = default;
};

// "cpu", or "cuda" with its devices ("cuda:0,1").
std::string to_string(const BackendChoice& choice);

// Whether this build and this machine can run `choice`: a clear error when
// accord was built without CUDA, no device is usable, a listed device does
// not exist, or devices are listed for the CPU.
Status check_backend(const BackendChoice& choice);

// How a rank's stage computes: where (the backend) and under which weights
// budget (bytes; 0: every weight resident, residency.hpp).
struct StageOptions {
  BackendChoice backend;
  std::uint64_t max_resident_bytes = 0;
};

}  // namespace accord
