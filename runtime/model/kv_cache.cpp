#include "runtime/model/kv_cache.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "kernels/cpu/quant.hpp"
#include "runtime/base/assert.hpp"

namespace accord {

namespace {

// Calls run(position, rows) for each stretch of [first, first + count)
// that lies in one block.
template <class Run>
void for_each_stretch(int first, int count, Run run) {
  for (int p = first; p < first + count;) {
    const int stretch = std::min(first + count - p, KvCache::kBlockPositions - p % KvCache::kBlockPositions);
    run(p, stretch);
    p += stretch;
  }
}

// n values of whole rows, converted to `element` as they are written (Q8_0
// by quant.hpp's scalar quantizer: the same bits on every path) and back.
void store_values(cpu::KvElement element, const float* from, std::size_t n, std::byte* to) {
  if (element == cpu::KvElement::f32) {
    std::memcpy(to, from, n * sizeof(float));
    return;
  }
  if (element == cpu::KvElement::q8_0) {
    cpu::quantize_q8_0(to, from, n);
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint16_t half = cpu::f32_to_f16(from[i]);
    std::memcpy(to + 2 * i, &half, sizeof half);
  }
}

void load_values(cpu::KvElement element, const std::byte* from, std::size_t n, float* to) {
  if (element == cpu::KvElement::f32) {
    std::memcpy(to, from, n * sizeof(float));
    return;
  }
  if (element == cpu::KvElement::q8_0) {
    cpu::dequantize_q8_0(to, from, n);
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    std::uint16_t half;
    std::memcpy(&half, from + 2 * i, sizeof half);
    to[i] = cpu::f16_to_f32(half);
  }
}

// Copies rows [first, first + count) of `unit` from `table`, laid out as
// `layout` says, into `keys` and `values` as floats (zeros where no block is).
void gather(const KvBlockLayout& layout, std::span<const std::shared_ptr<KvBlock>> table, int unit, int first,
            int count, float* keys, float* values) {
  const auto dim = static_cast<std::size_t>(layout.kv_dim);
  for_each_stretch(first, count, [&](int p, int rows) {
    const auto at = static_cast<std::size_t>(p - first) * dim, n = static_cast<std::size_t>(rows) * dim;
    const auto block = static_cast<std::size_t>(p >> KvCache::kBlockShift);
    if (block >= table.size()) {
      std::fill_n(keys + at, n, 0.0f);
      std::fill_n(values + at, n, 0.0f);
      return;
    }
    const std::byte* row =
        table[block]->data() + static_cast<std::size_t>(p % KvCache::kBlockPositions) * layout.row_bytes;
    load_values(layout.element, row + layout.part_offset(unit, 0), n, keys + at);
    load_values(layout.element, row + layout.part_offset(unit, 1), n, values + at);
  });
}

// The default image: the rows copied out as floats, unit by unit.
class RowsImage final : public KvImage {
 public:
  RowsImage(const KvStore& store, int positions)
      : KvImage(store.first_unit(), store.unit_count(), store.kv_dim(), positions) {
    for (int u = first_unit(); u < first_unit() + unit_count(); ++u) {
      store.view_rows(u, 0, positions, [&](std::span<const float> keys, std::span<const float> values) {
        rows_.insert(rows_.end(), keys.begin(), keys.end());
        rows_.insert(rows_.end(), values.begin(), values.end());
      });
    }
  }
  std::uint64_t own_bytes() const override { return rows_.size() * sizeof(float); }
  std::uint64_t shared_bytes() const override { return 0; }
  void view_rows(int unit, int first, int count, const RowsView& see) const override {
    const auto part = static_cast<std::size_t>(positions()) * kv_dim();
    const float* keys = rows_.data() + 2 * part * static_cast<std::size_t>(unit - first_unit()) +
                        static_cast<std::size_t>(first) * kv_dim();
    const auto n = static_cast<std::size_t>(count) * kv_dim();
    see({keys, n}, {keys + part, n});
  }

 private:
  std::vector<float> rows_;  // per unit: keys (positions, kv_dim), then values
};

}  // namespace

std::shared_ptr<const KvImage> KvStore::freeze(int positions) const {
  return std::make_shared<RowsImage>(*this, positions);
}

KvImageCost KvStore::freeze_cost(int positions) const {
  return {2 * static_cast<std::uint64_t>(positions) * static_cast<std::uint64_t>(unit_count_) *
              static_cast<std::uint64_t>(kv_dim_) * sizeof(float),
          0, 0};
}

Status KvStore::check_image(const KvImage& image) const {
  if (dynamic_cast<const RowsImage*>(&image) == nullptr) {
    return Error(ErrorCode::state, "the snapshot was taken of another kind of key/value cache");
  }
  if (image.first_unit() != first_unit_ || image.unit_count() != unit_count_ || image.kv_dim() != kv_dim_ ||
      image.positions() > capacity_) {
    return Error(ErrorCode::state, "the snapshot holds other units or positions than this rank's cache");
  }
  return {};
}

void KvStore::thaw(const KvImage& image) {
  const Status room = reserve(image.positions());
  ACCORD_ASSERT(room, "a store without pages has room for its whole context");
  for (int u = first_unit_; u < first_unit_ + unit_count_; ++u) {
    image.view_rows(u, 0, image.positions(), [&](std::span<const float> keys, std::span<const float> values) {
      write_rows(u, 0, image.positions(), keys.data(), values.data());
    });
  }
  shrink_to(image.positions());
}

// A paged cache's image: the blocks that hold its rows, shared.
class KvCache::BlockImage final : public KvImage {
 public:
  BlockImage(const KvCache& cache, int positions)
      : KvImage(cache.first_unit(), cache.unit_count(), cache.kv_dim(), positions),
        layout_(cache.layout_),
        blocks_(cache.owners_.begin(),
                cache.owners_.begin() + static_cast<std::ptrdiff_t>(cache.blocks_for(positions))) {}

  const KvBlockLayout& layout() const { return layout_; }
  const std::vector<std::shared_ptr<KvBlock>>& blocks() const { return blocks_; }
  std::uint64_t own_bytes() const override { return 0; }
  std::uint64_t shared_bytes() const override { return blocks_.size() * layout_.block_bytes; }
  void view_rows(int unit, int first, int count, const RowsView& see) const override {
    const auto floats = static_cast<std::size_t>(count) * kv_dim();
    std::vector<float> rows(2 * floats);
    gather(layout_, blocks_, unit, first, count, rows.data(), rows.data() + floats);
    see({rows.data(), floats}, {rows.data() + floats, floats});
  }

 private:
  KvBlockLayout layout_;
  std::vector<std::shared_ptr<KvBlock>> blocks_;
};

KvCache::KvCache(const ModelConfig& config, int first_unit, int unit_count, cpu::KvElement element,
                 std::shared_ptr<KvPool> pool)
    : KvStore(config, first_unit, unit_count, element),
      pool_(pool != nullptr ? std::move(pool) : std::make_shared<KvPool>()) {
  layout_.element = element;
  layout_.first_unit = first_unit;
  layout_.kv_dim = kv_dim();
  layout_.row_bytes = cpu::kv_bytes(element, static_cast<std::size_t>(kv_dim()));
  layout_.part_bytes = layout_.row_bytes * kBlockPositions;
  layout_.block_bytes = 2 * layout_.part_bytes * static_cast<std::size_t>(unit_count);
}

KvCache::~KvCache() = default;

cpu::KvView KvCache::view(int unit) const {
  ACCORD_ASSERT(holds_unit(unit), "a cache shows only the units it holds");
  return {blocks_.data(), layout_.part_offset(unit, 0), layout_.part_offset(unit, 1), kBlockShift, kv_dim(),
          layout_.element};
}

Status KvCache::reserve(int positions) {
  ACCORD_ASSERT(positions <= capacity(), "a cache holds at most its context");
  while (blocks_.size() < blocks_for(positions)) {
    auto block = KvBlock::take(pool_, layout_.block_bytes);
    if (!block) return block.error();
    blocks_.push_back((*block)->data());
    owners_.push_back(std::move(*block));
  }
  return {};
}

void KvCache::shrink_to(int positions) {
  const std::size_t kept = blocks_for(positions);
  if (owners_.size() <= kept) return;
  owners_.resize(kept);
  blocks_.resize(kept);
}

Status KvCache::prepare_write(int first, int end) {
  if (Status room = reserve(end); !room) return room;
  for (auto b = static_cast<std::size_t>(first >> kBlockShift); b < blocks_for(end); ++b) {
    if (!shared(b)) continue;
    auto copy = KvBlock::copy_of(*owners_[b]);
    if (!copy) return copy.error();
    blocks_[b] = (*copy)->data();
    replaced_.emplace_back(b, std::exchange(owners_[b], std::move(*copy)));
  }
  return {};
}

void KvCache::undo_writes() {
  for (auto& [b, original] : replaced_) {
    if (b >= owners_.size()) continue;  // given back since: nothing to put back
    blocks_[b] = original->data();
    owners_[b] = std::move(original);
  }
  replaced_.clear();
}

void KvCache::view_rows(int unit, int first, int count, const RowsView& see) const {
  const auto floats = static_cast<std::size_t>(count) * kv_dim();
  gathered_.resize(2 * floats);
  gather(layout_, owners_, unit, first, count, gathered_.data(), gathered_.data() + floats);
  see({gathered_.data(), floats}, {gathered_.data() + floats, floats});
}

void KvCache::write_rows(int unit, int first, int count, const float* keys, const float* values) {
  write_stretches(unit, first, count, keys, values, false);
}

void KvCache::rewrite_rows(int unit, int first, int count, const float* keys, const float* values) {
  write_stretches(unit, first, count, keys, values, true);
}

void KvCache::write_stretches(int unit, int first, int count, const float* keys_in, const float* values_in,
                              bool skip_shared) {
  if (count == 0) return;
  ACCORD_ASSERT(first + count <= reserved(), "rows are written only where the cache has reserved room");
  const auto dim = static_cast<std::size_t>(kv_dim());
  for_each_stretch(first, count, [&](int p, int rows) {
    const auto block = static_cast<std::size_t>(p >> kBlockShift);
    if (shared(block)) {
      ACCORD_ASSERT(skip_shared, "a block an image shares is copied before it is written (prepare_write)");
      return;
    }
    const auto at = static_cast<std::size_t>(p - first) * dim, n = static_cast<std::size_t>(rows) * dim;
    std::byte* row = blocks_[block] + static_cast<std::size_t>(p % kBlockPositions) * layout_.row_bytes;
    store_values(layout_.element, keys_in + at, n, row + layout_.part_offset(unit, 0));
    store_values(layout_.element, values_in + at, n, row + layout_.part_offset(unit, 1));
  });
}

std::shared_ptr<const KvImage> KvCache::freeze(int positions) const {
  ACCORD_ASSERT(positions <= reserved(), "an image holds rows the cache has room for");
  return std::make_shared<BlockImage>(*this, positions);
}

KvImageCost KvCache::freeze_cost(int positions) const {
  const std::size_t blocks = blocks_for(positions);
  const bool part_filled = positions % kBlockPositions != 0;
  return {0, blocks * layout_.block_bytes, part_filled ? layout_.block_bytes : 0};
}

Status KvCache::check_image(const KvImage& image) const {
  const auto* blocks = dynamic_cast<const BlockImage*>(&image);
  if (blocks == nullptr) return Error(ErrorCode::state, "the snapshot was taken of another kind of key/value cache");
  const KvBlockLayout& theirs = blocks->layout();
  if (theirs.element != layout_.element) {
    return Error(ErrorCode::state, "the snapshot's keys and values are of another type than this cache's");
  }
  if (image.first_unit() != first_unit() || image.unit_count() != unit_count() || image.kv_dim() != kv_dim() ||
      theirs.block_bytes != layout_.block_bytes || image.positions() > capacity()) {
    return Error(ErrorCode::state, "the snapshot holds other units or positions than this rank's cache");
  }
  return {};
}

void KvCache::thaw(const KvImage& image) {
  const auto& blocks = static_cast<const BlockImage&>(image).blocks();
  replaced_.clear();
  owners_ = blocks;
  blocks_.resize(owners_.size());
  std::transform(owners_.begin(), owners_.end(), blocks_.begin(), [](const auto& b) { return b->data(); });
}

}  // namespace accord
