// The key/value cache of a contiguous range of units (transformer blocks).
//
// KvStore is what the session's state needs of it wherever it lives (host
// memory, a CUDA device): its shape, and rows copied out and in. KvCache is
// the host one the CPU kernels write, with raw pointers for them.
//
// Owned by a rank's stage backend; the forward pass writes into it during a
// step and never keeps a pointer past the call.
#pragma once

#include <cstddef>
#include <functional>
#include <span>

#include "kernels/cpu/aligned.hpp"
#include "runtime/model/model.hpp"

namespace accord {

class KvStore {
 public:
  // Room for config.seq_len positions of units [first_unit, first_unit + unit_count).
  KvStore(const ModelConfig& config, int first_unit, int unit_count)
      : first_unit_(first_unit), unit_count_(unit_count), capacity_(config.seq_len), kv_dim_(config.kv_dim()) {}
  virtual ~KvStore() = default;
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  int first_unit() const { return first_unit_; }
  int unit_count() const { return unit_count_; }
  int capacity() const { return capacity_; }
  int kv_dim() const { return kv_dim_; }
  bool holds_unit(int unit) const { return unit >= first_unit_ && unit < first_unit_ + unit_count_; }

  std::size_t capacity_bytes() const { return static_cast<std::size_t>(capacity_) * position_bytes(); }
  // What one position's keys and values take over the held units.
  std::size_t position_bytes() const {
    return 2 * static_cast<std::size_t>(unit_count_) * static_cast<std::size_t>(kv_dim_) * sizeof(float);
  }

  // Shows rows [first, first + count) of `unit`'s keys and values, (count,
  // kv_dim) each, to `see`; the spans are valid during the call only.
  using RowsView = std::function<void(std::span<const float> keys, std::span<const float> values)>;
  virtual void view_rows(int unit, int first, int count, const RowsView& see) const = 0;
  // Overwrites those rows with `keys` and `values`, (count, kv_dim) each.
  virtual void write_rows(int unit, int first, int count, const float* keys, const float* values) = 0;

 private:
  int first_unit_;
  int unit_count_;
  int capacity_;
  int kv_dim_;
};

class KvCache final : public KvStore {
 public:
  KvCache(const ModelConfig& config, int first_unit, int unit_count);

  // (capacity, kv_dim) for `unit`, which must be held.
  float* keys(int unit) { return keys_.data() + offset(unit); }
  float* values(int unit) { return values_.data() + offset(unit); }
  const float* keys(int unit) const { return keys_.data() + offset(unit); }
  const float* values(int unit) const { return values_.data() + offset(unit); }

  void view_rows(int unit, int first, int count, const RowsView& see) const override;
  void write_rows(int unit, int first, int count, const float* keys, const float* values) override;

 private:
  std::size_t offset(int unit) const {
    return static_cast<std::size_t>(unit - first_unit()) * static_cast<std::size_t>(capacity()) * kv_dim();
  }

  cpu::AlignedVector<float> keys_;  // aligned for the kernels' vector loads
  cpu::AlignedVector<float> values_;
};

}  // namespace accord
