#include "runtime/model/kv_cache.hpp"

namespace accord {

KvCache::KvCache(const ModelConfig& config, int first_unit, int unit_count)
    : first_unit_(first_unit),
      unit_count_(unit_count),
      capacity_(config.seq_len),
      kv_dim_(config.kv_dim()),
      keys_(static_cast<std::size_t>(unit_count) * config.seq_len * config.kv_dim(), 0.0f),
      values_(keys_.size(), 0.0f) {}

}  // namespace accord
