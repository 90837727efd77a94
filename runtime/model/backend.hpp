// Where a session computes: the backend of `--backend` and `--devices`,
// and the weights budget of `--max-resident-bytes`. The stages themselves
// are stage_backend.hpp's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
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

// The element type of a rank's keys and values: `--kv-type`. F32 keeps
// the bits of every reference; F16 takes half the bytes (and so half the
// memory traffic of attention over a long context), each value rounded to
// nearest as it is written; Q8_0 (llama.cpp's --cache-type-k q8_0) takes
// 34 bytes per 32 values, each group of 32 quantized to 8 bits as it is
// written, and needs a model whose kv_dim is a multiple of 32.
enum class KvType { f32, f16, q8_0 };
std::string_view to_string(KvType type);
// "f32", "f16" or "q8_0", or an error naming what was given.
Result<KvType> parse_kv_type(std::string_view name);

class KvPool;  // runtime/model/kv_pool.hpp

// How a rank's stage computes: where (the backend), under which weights
// budget (bytes; 0: every weight resident, residency.hpp), and its keys
// and values (kv_cache.hpp).
struct StageOptions {
  BackendChoice backend;
  std::uint64_t max_resident_bytes = 0;
  KvType kv_type = KvType::f32;
  // The pool the stage's cache takes its blocks from, shared with other
  // sessions' (serve's slots) under its budget; nullptr: a pool of its own
  // without a budget (the context bounds it).
  std::shared_ptr<KvPool> kv_pool;
  // Each routed block's experts spread over this many ranks
  // (runtime/rank/expert_placement.hpp); 1: each stage holds its own.
  int expert_ranks = 1;
};

}  // namespace accord
