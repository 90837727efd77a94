#include "runtime/model/kv_pool.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

namespace accord {

namespace {

constexpr std::align_val_t kAlignment{64};  // a cache line, and AVX-512's widest load

// In MiB, or in bytes below one.
std::string mib(std::uint64_t bytes) {
  return bytes < (1u << 20) ? std::to_string(bytes) + " bytes" : std::to_string((bytes + (1u << 19)) >> 20) + " MiB";
}

}  // namespace

Result<std::byte*> KvPool::take(std::size_t bytes) {
  {
    std::lock_guard lock(mutex_);
    if (budget_bytes_ != 0 && used_bytes_ + bytes > budget_bytes_) {
      return Error(ErrorCode::state, "the KV pool's budget of " + mib(budget_bytes_) + " is spent (" +
                                         mib(used_bytes_) + " held by sessions; a block takes " +
                                         std::to_string(bytes) + " bytes)");
    }
    used_bytes_ += bytes;
    peak_bytes_ = std::max(peak_bytes_, used_bytes_);
  }
  auto* block = static_cast<std::byte*>(::operator new(bytes, kAlignment));
  std::memset(block, 0, bytes);
  return block;
}

void KvPool::give_back(std::byte* block, std::size_t bytes) {
  ::operator delete(block, kAlignment);
  std::lock_guard lock(mutex_);
  used_bytes_ -= bytes;
}

Result<std::shared_ptr<KvBlock>> KvBlock::take(std::shared_ptr<KvPool> pool, std::size_t bytes) {
  auto data = pool->take(bytes);
  if (!data) return data.error();
  return std::make_shared<KvBlock>(std::move(pool), *data, bytes);
}

Result<std::shared_ptr<KvBlock>> KvBlock::copy_of(const KvBlock& original) {
  auto copy = take(original.pool_, original.bytes_);
  if (!copy) return copy.error();
  std::memcpy((*copy)->data(), original.data_, original.bytes_);
  return copy;
}

std::uint64_t KvPool::used_bytes() const {
  std::lock_guard lock(mutex_);
  return used_bytes_;
}

std::uint64_t KvPool::peak_bytes() const {
  std::lock_guard lock(mutex_);
  return peak_bytes_;
}

}  // namespace accord
