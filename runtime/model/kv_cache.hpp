// The key/value cache of a contiguous range of units (transformer blocks).
//
// KvStore is what the session's state needs of it wherever it lives (host
// memory, a CUDA device): its shape, room for positions, and rows copied
// out and in. KvCache is the host one the CPU kernels read, paged: a table
// of blocks from a KvPool, each holding kBlockPositions positions of every
// held unit's keys and values, taken as positions fill (reserve) and given
// back when the session is emptied or a failed step is undone (shrink_to).
// Positions whose block was
// never taken read as zeros.
//
// Owned by a rank's stage backend; the forward pass writes into it during a
// step and never keeps a pointer past the call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kernels/cpu/ops.hpp"
#include "runtime/base/error.hpp"
#include "runtime/model/kv_pool.hpp"
#include "runtime/model/model.hpp"

namespace accord {

class KvStore {
 public:
  // Room for config.seq_len positions of units [first_unit, first_unit +
  // unit_count), each value stored as `element`.
  KvStore(const ModelConfig& config, int first_unit, int unit_count, cpu::KvElement element = cpu::KvElement::f32)
      : first_unit_(first_unit),
        unit_count_(unit_count),
        capacity_(config.seq_len),
        kv_dim_(config.kv_dim()),
        row_bytes_(cpu::kv_bytes(element, static_cast<std::size_t>(config.kv_dim()))) {}
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
  std::size_t position_bytes() const { return 2 * static_cast<std::size_t>(unit_count_) * row_bytes_; }

  // Room for positions [0, positions), or why not (a spent pool); rows
  // already there are kept.
  virtual Status reserve(int positions) = 0;
  // The positions there is room for now (at least what was reserved).
  virtual int reserved() const = 0;
  // Gives back the room past the first `positions` (reserved() no longer
  // passes it by a whole block); rows below are kept. 0: the session is empty.
  virtual void shrink_to(int positions) = 0;
  // The bytes the store holds now.
  virtual std::uint64_t held_bytes() const = 0;

  // Shows rows [first, first + count) of `unit`'s keys and values as
  // floats, (count, kv_dim) each, to `see`; the spans are valid during the
  // call only.
  using RowsView = std::function<void(std::span<const float> keys, std::span<const float> values)>;
  virtual void view_rows(int unit, int first, int count, const RowsView& see) const = 0;
  // Overwrites those rows with `keys` and `values`, (count, kv_dim) each;
  // they must be reserved.
  virtual void write_rows(int unit, int first, int count, const float* keys, const float* values) = 0;

 private:
  int first_unit_;
  int unit_count_;
  int capacity_;
  int kv_dim_;
  std::size_t row_bytes_;  // one position of one unit's keys
};

class KvCache final : public KvStore {
 public:
  static constexpr int kBlockShift = 5;
  static constexpr int kBlockPositions = 1 << kBlockShift;

  // Blocks from `pool`, shared with other caches; nullptr: a pool of its own
  // without a budget.
  KvCache(const ModelConfig& config, int first_unit, int unit_count, cpu::KvElement element = cpu::KvElement::f32,
          std::shared_ptr<KvPool> pool = nullptr);
  ~KvCache() override;

  cpu::KvElement element() const { return element_; }
  // `unit`'s rows, which must be held, for the kernels: valid until the
  // next reserve or shrink_to.
  cpu::KvView view(int unit) const;

  Status reserve(int positions) override;
  int reserved() const override { return static_cast<int>(blocks_.size()) * kBlockPositions; }
  void shrink_to(int positions) override;
  std::uint64_t held_bytes() const override { return blocks_.size() * block_bytes_; }
  void view_rows(int unit, int first, int count, const RowsView& see) const override;
  void write_rows(int unit, int first, int count, const float* keys, const float* values) override;

 private:
  // Bytes into a block where `unit`'s keys (values: + 1) begin.
  std::size_t part_offset(int unit, int part) const {
    return static_cast<std::size_t>(2 * (unit - first_unit()) + part) * part_bytes_;
  }
  // Copies the rows into `keys` and `values` as floats (zeros where no block is).
  void gather(int unit, int first, int count, float* keys, float* values) const;

  cpu::KvElement element_;
  std::shared_ptr<KvPool> pool_;
  std::size_t row_bytes_;    // one position of one unit's keys
  std::size_t part_bytes_;   // kBlockPositions rows
  std::size_t block_bytes_;  // every held unit's keys and values
  std::vector<std::byte*> blocks_;
  mutable std::vector<float> gathered_;  // view_rows' copy
};

}  // namespace accord
