#include "runtime/model/kv_cache.hpp"

#include <algorithm>

namespace accord {

KvCache::KvCache(const ModelConfig& config, int first_unit, int unit_count)
    : KvStore(config, first_unit, unit_count),
      keys_(static_cast<std::size_t>(unit_count) * config.seq_len * config.kv_dim(), 0.0f),
      values_(keys_.size(), 0.0f) {}

void KvCache::view_rows(int unit, int first, int count, const RowsView& see) const {
  const auto at = static_cast<std::size_t>(first) * kv_dim();
  const auto floats = static_cast<std::size_t>(count) * kv_dim();
  see({keys(unit) + at, floats}, {values(unit) + at, floats});
}

void KvCache::write_rows(int unit, int first, int count, const float* keys_in, const float* values_in) {
  const auto at = static_cast<std::size_t>(first) * kv_dim();
  const auto floats = static_cast<std::size_t>(count) * kv_dim();
  std::copy_n(keys_in, floats, keys(unit) + at);
  std::copy_n(values_in, floats, values(unit) + at);
}

}  // namespace accord
