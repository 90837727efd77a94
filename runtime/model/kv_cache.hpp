// The key/value cache of a contiguous range of units (transformer blocks).
//
// Owned by whoever owns the rank's state; the Transformer writes into it
// during a forward step and never keeps a pointer past the call.
#pragma once

#include <cstddef>
#include <vector>

#include "kernels/cpu/aligned.hpp"
#include "runtime/model/model.hpp"

namespace accord {

class KvCache {
 public:
  // Room for config.seq_len positions of units [first_unit, first_unit + unit_count).
  KvCache(const ModelConfig& config, int first_unit, int unit_count);

  int first_unit() const { return first_unit_; }
  int unit_count() const { return unit_count_; }
  int capacity() const { return capacity_; }
  int kv_dim() const { return kv_dim_; }
  bool holds_unit(int unit) const { return unit >= first_unit_ && unit < first_unit_ + unit_count_; }

  // (capacity, kv_dim) for `unit`, which must be held.
  float* keys(int unit) { return keys_.data() + offset(unit); }
  float* values(int unit) { return values_.data() + offset(unit); }
  const float* keys(int unit) const { return keys_.data() + offset(unit); }
  const float* values(int unit) const { return values_.data() + offset(unit); }

  std::size_t capacity_bytes() const { return (keys_.size() + values_.size()) * sizeof(float); }
  // What one position's keys and values take over the held units.
  std::size_t position_bytes() const {
    return 2 * static_cast<std::size_t>(unit_count_) * static_cast<std::size_t>(kv_dim_) * sizeof(float);
  }

 private:
  std::size_t offset(int unit) const {
    return static_cast<std::size_t>(unit - first_unit_) * static_cast<std::size_t>(capacity_) * kv_dim_;
  }

  int first_unit_;
  int unit_count_;
  int capacity_;
  int kv_dim_;
  cpu::AlignedVector<float> keys_;  // aligned for the kernels' vector loads
  cpu::AlignedVector<float> values_;
};

}  // namespace accord
