#include "runtime/model/kv_cache.hpp"

#include <algorithm>
#include <cstring>

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

}  // namespace

KvCache::KvCache(const ModelConfig& config, int first_unit, int unit_count, cpu::KvElement element,
                 std::shared_ptr<KvPool> pool)
    : KvStore(config, first_unit, unit_count, element),
      element_(element),
      pool_(pool != nullptr ? std::move(pool) : std::make_shared<KvPool>()),
      row_bytes_(cpu::kv_bytes(element, static_cast<std::size_t>(kv_dim()))),
      part_bytes_(row_bytes_ * kBlockPositions),
      block_bytes_(2 * part_bytes_ * static_cast<std::size_t>(unit_count)) {}

KvCache::~KvCache() { shrink_to(0); }

cpu::KvView KvCache::view(int unit) const {
  ACCORD_ASSERT(holds_unit(unit), "a cache shows only the units it holds");
  return {blocks_.data(), part_offset(unit, 0), part_offset(unit, 1), kBlockShift, kv_dim(), element_};
}

Status KvCache::reserve(int positions) {
  ACCORD_ASSERT(positions <= capacity(), "a cache holds at most its context");
  const auto needed = static_cast<std::size_t>((positions + kBlockPositions - 1) / kBlockPositions);
  while (blocks_.size() < needed) {
    auto block = pool_->take(block_bytes_);
    if (!block) return block.error();
    blocks_.push_back(*block);
  }
  return {};
}

void KvCache::shrink_to(int positions) {
  const auto kept = static_cast<std::size_t>((positions + kBlockPositions - 1) / kBlockPositions);
  while (blocks_.size() > kept) {
    pool_->give_back(blocks_.back(), block_bytes_);
    blocks_.pop_back();
  }
}

void KvCache::gather(int unit, int first, int count, float* keys_out, float* values_out) const {
  const auto dim = static_cast<std::size_t>(kv_dim());
  for_each_stretch(first, count, [&](int p, int rows) {
    const auto at = static_cast<std::size_t>(p - first) * dim, n = static_cast<std::size_t>(rows) * dim;
    const auto block = static_cast<std::size_t>(p >> kBlockShift);
    if (block >= blocks_.size()) {
      std::fill_n(keys_out + at, n, 0.0f);
      std::fill_n(values_out + at, n, 0.0f);
      return;
    }
    const std::byte* row = blocks_[block] + static_cast<std::size_t>(p % kBlockPositions) * row_bytes_;
    load_values(element_, row + part_offset(unit, 0), n, keys_out + at);
    load_values(element_, row + part_offset(unit, 1), n, values_out + at);
  });
}

void KvCache::view_rows(int unit, int first, int count, const RowsView& see) const {
  const auto floats = static_cast<std::size_t>(count) * kv_dim();
  gathered_.resize(2 * floats);
  gather(unit, first, count, gathered_.data(), gathered_.data() + floats);
  see({gathered_.data(), floats}, {gathered_.data() + floats, floats});
}

void KvCache::write_rows(int unit, int first, int count, const float* keys_in, const float* values_in) {
  if (count == 0) return;
  ACCORD_ASSERT(first + count <= static_cast<int>(blocks_.size()) * kBlockPositions,
                "rows are written only where the cache has reserved room");
  const auto dim = static_cast<std::size_t>(kv_dim());
  for_each_stretch(first, count, [&](int p, int rows) {
    const auto at = static_cast<std::size_t>(p - first) * dim, n = static_cast<std::size_t>(rows) * dim;
    std::byte* row = blocks_[static_cast<std::size_t>(p >> kBlockShift)] +
                     static_cast<std::size_t>(p % kBlockPositions) * row_bytes_;
    store_values(element_, keys_in + at, n, row + part_offset(unit, 0));
    store_values(element_, values_in + at, n, row + part_offset(unit, 1));
  });
}

}  // namespace accord
