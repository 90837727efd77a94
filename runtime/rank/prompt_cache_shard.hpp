// One rank's part of a prompt-cache save or load (docs/prompt-cache.md),
// phase by phase, over the on-disk format of prompt_cache.hpp. Every rank
// runs it from its RankParticipant: the files through RankPromptCache, the state
// through RankWorker (pack_shard, install_shard). CAF-free.
//
// A shard travels as floats: for each of the rank's units, the keys of rows
// 0..n-1, then their values, exactly as kv.bin holds them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/model/model.hpp"
#include "runtime/rank/partition.hpp"
#include "runtime/rank/prompt_cache.hpp"
#include "runtime/rank/state.hpp"

namespace accord {

// What one rank's shard records and must match on load: fixed for the
// rank's lifetime.
struct ShardIdentity {
  std::string model_identity;
  PromptCacheTopology topology;
  int kv_dim = 0;
  int context = 0;  // the model's maximum position

  // The floats of a shard holding `rows` rows of every unit of the rank.
  std::size_t shard_floats(int rows) const;
};

ShardIdentity shard_identity(const std::string& model_identity, const ModelConfig& config, int ranks, int rank,
                             const UnitRange& units);

// A fresh save id: 16 hex digits, given to every rank of one save.
std::string new_save_id();

// What the caller asks a save or a load for.
struct PromptCacheRequest {
  std::filesystem::path root;
  PromptCacheDescriptor descriptor;
  std::vector<int> prefix;
  std::string prepared_input;  // empty for plain tokens
};

// --- the state's side -------------------------------------------------------

// PromptCacheSavePreflight: the prefix must be the start of the state's tokens.
Status check_prefix_held(const SessionState& state, std::span<const int> prefix);
// The shard of the state's first `rows` rows.
std::vector<float> pack_shard(const SessionState& state, int rows);
// Commit of a load: copies the shard into the KV cache and makes `prefix`
// the committed tokens. The shard must hold prefix.size() rows.
void install_shard(SessionState& state, std::span<const float> shard, std::span<const int> prefix, std::uint64_t epoch);

// --- the files' side ---------------------------------------------------------

// Every check of docs/prompt-cache.md "Load", 3 to 5, of one rank's manifest.
Status check_manifest(const PromptCacheManifest& manifest, const ShardIdentity& identity,
                      const PromptCacheRequest& request);

// One rank's save: prepared (written, verified, invisible), then published
// (visible, reversible), then committed or reverted.
class ShardSave {
 public:
  // PromptCacheSavePreparation. `save_id` is the same on every rank of the save.
  Status prepare(const ShardIdentity& identity, const PromptCacheRequest& request, std::uint64_t epoch,
                 const std::string& save_id, std::span<const float> shard, Env& env);
  // PromptCacheSavePublication.
  Status publish();
  // Commit: superseded generations go.
  void commit();
  // Abort: points CURRENT back after a publication, or discards the
  // prepared generation before one. An error means the rank cannot prove
  // which generation is live.
  Status revert();

  const std::string& generation() const { return prepared_->name; }
  // Where the shard file lies now: in the staging folder until published,
  // then under generations/.
  std::filesystem::path shard_path() const;
  std::uint64_t shard_bytes() const { return manifest_.shard_bytes; }

 private:
  PromptCacheManifest manifest_;
  std::optional<PreparedGeneration> prepared_;
  std::optional<Publication> publication_;
};

// One rank's load: the live generation is pinned and checked, then its
// shard read and checked. Nothing changes on disk or in the state.
class ShardLoad {
 public:
  // PromptCacheLoadPreflight: the rank's live generation and its manifest.
  Status preflight(const ShardIdentity& identity, const PromptCacheRequest& request, Env& env);
  // The save the pinned generation belongs to.
  const std::string& save_id() const { return live_->manifest.save_id; }
  // PromptCacheLoadPreparation: refuses a generation of another save than
  // `save_id` (every rank is given the same one), then reads the shard and
  // checks its size and checksum.
  Result<std::vector<float>> read(const ShardIdentity& identity, const std::string& save_id) const;

 private:
  std::optional<LiveGeneration> live_;
};

}  // namespace accord
