// One rank's prompt-cache shard I/O: the save or load of the open
// transaction, held between its phases. The rank's RankParticipant owns it beside
// the RankWorker; it never touches the rank's state (the worker packs and
// installs shards), only the shard handed to it. CAF-free.
//
// Abort (revert) reverses a publication or discards a prepared generation;
// a failed reversal means this rank cannot prove which generation is live.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/rank/prompt_cache_shard.hpp"

namespace accord {

class RankPromptCache {
 public:
  // Files go through `env`, which must outlive the cache.
  explicit RankPromptCache(ShardIdentity identity, Env& env = posix_env())
      : identity_(std::move(identity)), env_(env) {}

  // PromptCacheSavePreparation: writes and verifies the unpublished shard.
  Status prepare_save(std::uint64_t epoch, const PromptCacheRequest& request, const std::string& save_id,
                      std::span<const float> shard);
  // PromptCacheSavePublication.
  Status publish(std::uint64_t epoch);
  // PromptCacheLoadPreflight: pins and checks the live generation; returns
  // the save it belongs to.
  Result<std::string> begin_load(std::uint64_t epoch, const PromptCacheRequest& request);
  // PromptCacheLoadPreparation: the pinned generation's shard, if it
  // belongs to `save_id` (rank 0's) and is intact.
  Result<std::vector<float>> read_load(std::uint64_t epoch, const std::string& save_id) const;

  // Fault injection (`corrupt`): flips a byte in the middle of the shard
  // the open save wrote, where it lies now, as a failing disk would.
  Status corrupt_shard(std::uint64_t epoch);
  // The decisions on transaction `epoch`; other epochs have nothing here.
  void commit(std::uint64_t epoch);
  Status revert(std::uint64_t epoch);
  // The rank is poisoned: reverse whatever is open, as far as it goes.
  void forget();
  // A reset skipped over the open transaction, whose decision this rank
  // never heard: it may have committed elsewhere, so nothing on disk is
  // reversed; only the save's lock goes. Recovery reconciles the ranks.
  void abandon() { close(); }

 private:
  Status expect_open(std::uint64_t epoch, bool save) const;
  void close();

  ShardIdentity identity_;
  Env& env_;
  std::uint64_t epoch_ = 0;  // of the open save or load
  std::optional<ShardSave> save_;
  std::optional<ShardLoad> load_;
};

}  // namespace accord
