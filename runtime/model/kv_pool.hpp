// The memory a rank's key/value caches take their blocks from, under one
// byte budget (docs/residency.md, "Keys and values").
//
// Sessions on a rank (serve's slots, a node's sessions) share one pool:
// each cache takes a block when its positions reach it and gives its blocks
// back when it is emptied or destroyed, so a session costs what it holds,
// not its whole context. A take that would pass the budget is refused with
// an error, and the step that asked aborts with nothing changed.
//
// Thread-safe: slots take and give back from their own threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "runtime/base/error.hpp"

namespace accord {

class KvPool {
 public:
  // budget_bytes 0: no budget.
  explicit KvPool(std::uint64_t budget_bytes = 0) : budget_bytes_(budget_bytes) {}
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  // A zeroed block of `bytes`, aligned for the kernels' vector loads, or
  // why not (the budget).
  Result<std::byte*> take(std::size_t bytes);
  // A block from take() of the same size, no longer used.
  void give_back(std::byte* block, std::size_t bytes);

  std::uint64_t budget_bytes() const { return budget_bytes_; }
  std::uint64_t used_bytes() const;
  // The most that was ever held at once.
  std::uint64_t peak_bytes() const;

 private:
  const std::uint64_t budget_bytes_;
  mutable std::mutex mutex_;
  std::uint64_t used_bytes_ = 0;
  std::uint64_t peak_bytes_ = 0;
};

// One block's bytes from a pool, given back when the last holder lets go:
// a cache and the snapshots taken of it share blocks this way, and a cache
// copies a shared block before it writes into it (KvCache::prepare_write).
class KvBlock {
 public:
  // A zeroed block of `bytes` from `pool`, or why not (its budget).
  static Result<std::shared_ptr<KvBlock>> take(std::shared_ptr<KvPool> pool, std::size_t bytes);
  // A copy of `original`'s bytes, from its pool.
  static Result<std::shared_ptr<KvBlock>> copy_of(const KvBlock& original);
  KvBlock(std::shared_ptr<KvPool> pool, std::byte* data, std::size_t bytes)
      : pool_(std::move(pool)), data_(data), bytes_(bytes) {}
  ~KvBlock() { pool_->give_back(data_, bytes_); }
  KvBlock(const KvBlock&) = delete;
  KvBlock& operator=(const KvBlock&) = delete;

  std::byte* data() const { return data_; }

 private:
  std::shared_ptr<KvPool> pool_;
  std::byte* data_;
  std::size_t bytes_;
};

}  // namespace accord
