#include "runtime/rank/rank_prompt_cache.hpp"

#include "runtime/fault/fault_plan.hpp"

namespace accord {

Status RankPromptCache::expect_open(std::uint64_t epoch, bool save) const {
  if (epoch == epoch_ && (save ? save_.has_value() : load_.has_value())) return {};
  return Error(ErrorCode::state, "rank " + std::to_string(identity_.topology.rank) + " has no prompt-cache " +
                                     (save ? "save" : "load") + " open for epoch " + std::to_string(epoch));
}

void RankPromptCache::close() {
  save_.reset();
  load_.reset();
}

Status RankPromptCache::prepare_save(std::uint64_t epoch, const PromptCacheRequest& request, const std::string& save_id,
                                     std::span<const float> shard) {
  close();
  epoch_ = epoch;
  save_.emplace();
  return save_->prepare(identity_, request, epoch, save_id, shard, env_);
}

Status RankPromptCache::publish(std::uint64_t epoch) {
  if (Status ok = expect_open(epoch, true); !ok) return ok;
  return save_->publish();
}

Result<std::string> RankPromptCache::begin_load(std::uint64_t epoch, const PromptCacheRequest& request) {
  close();
  epoch_ = epoch;
  ShardLoad load;
  if (Status ok = load.preflight(identity_, request, env_); !ok) return ok.error();
  load_ = std::move(load);
  return load_->save_id();
}

Result<std::vector<float>> RankPromptCache::read_load(std::uint64_t epoch, const std::string& save_id) const {
  if (Status ok = expect_open(epoch, false); !ok) return ok.error();
  return load_->read(identity_, save_id);
}

Status RankPromptCache::corrupt_shard(std::uint64_t epoch) {
  if (Status ok = expect_open(epoch, true); !ok) return ok;
  return flip_middle_byte(env_, save_->shard_path());
}

void RankPromptCache::commit(std::uint64_t epoch) {
  if (epoch != epoch_) return;
  if (save_) save_->commit();
  close();
}

Status RankPromptCache::revert(std::uint64_t epoch) {
  if (epoch != epoch_) return {};
  Status reverted = save_ ? save_->revert() : Status{};
  close();
  return reverted;
}

void RankPromptCache::forget() { (void)revert(epoch_); }

}  // namespace accord
