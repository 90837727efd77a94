// The key/value cache of a contiguous range of units (transformer blocks).
//
// KvStore is what the session's state needs of it wherever it lives (host
// memory, a CUDA device): its shape, room for positions, rows copied out
// and in, and stable images of its first rows for snapshots. KvCache is the
// host one the CPU kernels read, paged: a table of blocks from a KvPool,
// each holding kBlockPositions positions of every held unit's keys and
// values, taken as positions fill (reserve) and given back when the session
// is emptied or a failed step is undone (shrink_to). Positions whose block
// was never taken read as zeros.
//
// Blocks are shared, copy-on-write: an image (freeze) holds the blocks it
// was taken from, a cache thawed from it holds them too, and a cache copies
// a shared block before it writes into it (prepare_write). So a snapshot
// costs no copy, stays what it was however its sources advance, and a
// block is copied at most once, when first written after being shared.
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

// A stable copy of a store's first rows: what a snapshot holds of the
// cache. Immutable; shared by the snapshot and every cache thawed from it.
class KvImage {
 public:
  KvImage(int first_unit, int unit_count, int kv_dim, int positions)
      : first_unit_(first_unit), unit_count_(unit_count), kv_dim_(kv_dim), positions_(positions) {}
  virtual ~KvImage() = default;
  KvImage(const KvImage&) = delete;
  KvImage& operator=(const KvImage&) = delete;

  int first_unit() const { return first_unit_; }
  int unit_count() const { return unit_count_; }
  int kv_dim() const { return kv_dim_; }
  int positions() const { return positions_; }
  // The bytes it holds that no cache holds: what it costs beyond sharing.
  virtual std::uint64_t own_bytes() const = 0;
  // The bytes of blocks it shares with caches (0 where it copied).
  virtual std::uint64_t shared_bytes() const = 0;

  // Shows rows [first, first + count) of `unit`, below positions(), as
  // floats to `see` (KvStore::view_rows).
  using RowsView = std::function<void(std::span<const float> keys, std::span<const float> values)>;
  virtual void view_rows(int unit, int first, int count, const RowsView& see) const = 0;

 private:
  int first_unit_;
  int unit_count_;
  int kv_dim_;
  int positions_;
};

// What a snapshot of a store's first rows costs, without taking it.
struct KvImageCost {
  std::uint64_t copied_bytes = 0;  // copied now
  std::uint64_t shared_bytes = 0;  // shared with the store, copied by neither
  // At most what the store copies later, when it writes into blocks the
  // image shares (the last, part-filled one as it appends).
  std::uint64_t copy_on_write_bytes = 0;
};

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
  // Room for [0, end), and rows [first, end) writable: blocks there that an
  // image shares are copied first. The copies stay until settle_writes()
  // (the write committed) or undo_writes() (it did not: the shared blocks
  // come back as they were). Or why not (a spent pool); what it took by
  // then stays until either call.
  virtual Status prepare_write(int /*first*/, int end) { return reserve(end); }
  virtual void settle_writes() {}
  virtual void undo_writes() {}
  // As write_rows, for putting back rows an aborted write may have changed:
  // rows in blocks still shared are left as they are, since a write copies
  // a block before changing it.
  virtual void rewrite_rows(int unit, int first, int count, const float* keys, const float* values) {
    write_rows(unit, first, count, keys, values);
  }
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

  // A stable image of rows [0, positions) (at most reserved()): here, a
  // copy of the rows; a paged cache shares its blocks instead.
  virtual std::shared_ptr<const KvImage> freeze(int positions) const;
  // What freeze(positions) would cost; nothing changes.
  virtual KvImageCost freeze_cost(int positions) const;
  // Whether `image` fits this store (its units, width and kind), or why not.
  virtual Status check_image(const KvImage& image) const;
  // Rows [0, image.positions()) become the image's, room past them is given
  // back; check_image passed.
  virtual void thaw(const KvImage& image);

 private:
  int first_unit_;
  int unit_count_;
  int capacity_;
  int kv_dim_;
  std::size_t row_bytes_;  // one position of one unit's keys
};

// Where rows lie in the blocks of a paged cache of some units.
struct KvBlockLayout {
  cpu::KvElement element = cpu::KvElement::f32;
  int first_unit = 0;
  int kv_dim = 0;
  std::size_t row_bytes = 0;    // one position of one unit's keys
  std::size_t part_bytes = 0;   // a block's rows of one unit's keys (or values)
  std::size_t block_bytes = 0;  // every held unit's keys and values

  // Bytes into a block where `unit`'s keys (part 0) or values (1) begin.
  std::size_t part_offset(int unit, int part) const {
    return static_cast<std::size_t>(2 * (unit - first_unit) + part) * part_bytes;
  }
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

  cpu::KvElement element() const { return layout_.element; }
  // `unit`'s rows, which must be held, for the kernels: valid until the
  // next reserve or shrink_to.
  cpu::KvView view(int unit) const;

  Status reserve(int positions) override;
  int reserved() const override { return static_cast<int>(blocks_.size()) * kBlockPositions; }
  void shrink_to(int positions) override;
  std::uint64_t held_bytes() const override { return blocks_.size() * layout_.block_bytes; }
  void view_rows(int unit, int first, int count, const RowsView& see) const override;
  void write_rows(int unit, int first, int count, const float* keys, const float* values) override;

  Status prepare_write(int first, int end) override;
  void settle_writes() override { replaced_.clear(); }
  void undo_writes() override;
  void rewrite_rows(int unit, int first, int count, const float* keys, const float* values) override;
  std::shared_ptr<const KvImage> freeze(int positions) const override;
  KvImageCost freeze_cost(int positions) const override;
  Status check_image(const KvImage& image) const override;
  void thaw(const KvImage& image) override;

 private:
  void write_stretches(int unit, int first, int count, const float* keys, const float* values, bool skip_shared);
  bool shared(std::size_t block) const { return owners_[block].use_count() > 1; }
  std::size_t blocks_for(int positions) const {
    return static_cast<std::size_t>((positions + kBlockPositions - 1) / kBlockPositions);
  }

  class BlockImage;

  KvBlockLayout layout_;
  std::shared_ptr<KvPool> pool_;
  std::vector<std::shared_ptr<KvBlock>> owners_;  // the table; images may share its blocks
  std::vector<std::byte*> blocks_;                // owners_' bytes, as the kernels read them
  // Shared blocks that prepare_write replaced with copies, by index, until
  // the write settles or is undone.
  std::vector<std::pair<std::size_t, std::shared_ptr<KvBlock>>> replaced_;
  mutable std::vector<float> gathered_;  // view_rows' copy
};

}  // namespace accord
