// The prompt cache on disk (docs/prompt-cache.md): one folder per rank,
// each with a CURRENT file naming the live generation and a generations/
// folder. A generation holds the rank's manifest.json and its KV shard.
//
// Writing is a reversible two-step: prepare a generation under a temporary
// name (written, fsynced, checksum re-read), then publish it by renaming it
// into generations/ and switching CURRENT, remembering the previous one.
// commit() removes superseded generations; revert() points CURRENT back.
// Reading validates everything (version, identity, topology, prefix,
// paths, size, checksum) before any byte reaches the caller.
//
// Writers to one rank folder are serialised by an flock on rank-NN/LOCK,
// held from preparation to commit or revert; readers take no lock. A
// writer deletes only what it could have written: folders named like its
// generations, inside folders that are not symbolic links, and in them only
// the files a generation holds.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/matmul.hpp"
#include "runtime/base/error.hpp"
#include "runtime/io/env.hpp"
#include "runtime/rank/prompt_cache_descriptor.hpp"

namespace accord {

inline constexpr int kPromptCacheFormatVersion = 1;

struct PromptCacheTopology {
  int ranks = 1;
  int rank = 0;
  int first_unit = 0;
  int unit_count = 0;
  bool operator==(const PromptCacheTopology&) const = default;
};

struct PromptCacheManifest {
  int format_version = kPromptCacheFormatVersion;
  // cpu::kArithmeticVersion of the saving build; 1 where a manifest
  // predates the field.
  int arithmetic_version = cpu::kArithmeticVersion;
  std::string model_identity;
  PromptCacheTopology topology;
  int kv_dim = 0;
  int prefix_token_count = 0;
  std::string prefix_sha256;  // of the prefix ids as little-endian u32
  PromptCacheDescriptor descriptor;
  std::string prepared_input;  // identity of a prepared input, empty for plain tokens
  std::uint64_t epoch = 0;     // the saving transaction
  std::string save_id;         // the same on every rank of one save
  std::string shard_file = "kv.bin";
  std::uint64_t shard_bytes = 0;
  std::string shard_sha256;
};

std::string manifest_to_json(const PromptCacheManifest& manifest);
Result<PromptCacheManifest> manifest_from_json(std::string_view text);

// The folder of one rank: root/rank-NN.
std::filesystem::path rank_folder(const std::filesystem::path& root, int rank);
// The folder of generation `name` of a rank: rank_dir/generations/name.
std::filesystem::path generation_folder(const std::filesystem::path& rank_dir, const std::string& name);
// Where a generation is written before it is published: rank_dir/.staging-name.
std::filesystem::path staging_folder(const std::filesystem::path& rank_dir, const std::string& name);
// The generation a rank folder's entry stages (".staging-NAME" gives NAME),
// or "" when the entry is no staging folder of this cache.
std::string staged_generation(const std::string& entry);
// The rest of a rank folder: rank_dir/generations, rank_dir/CURRENT and
// rank_dir/LOCK (the writers' lock).
std::filesystem::path generations_folder(const std::filesystem::path& rank_dir);
std::filesystem::path current_file(const std::filesystem::path& rank_dir);
std::filesystem::path lock_file(const std::filesystem::path& rank_dir);

// The name of the generation a save writes: <epoch>-<save id>, the epoch in
// decimal, the save id in lower-case hex. is_generation_name() is true for
// these names and no others.
std::string generation_name(std::uint64_t epoch, const std::string& save_id);
bool is_generation_name(const std::string& name);

// The generation rank_dir/CURRENT names; nullopt when there is no CURRENT.
// An unreadable CURRENT, or one that names no generation, is an error.
Result<std::optional<std::string>> read_current(const std::filesystem::path& rank_dir, Env& env = posix_env());

// A generation written and verified but not yet visible.
// It holds the rank folder's writer lock until the last copy goes.
struct PreparedGeneration {
  std::filesystem::path rank_dir;
  std::string name;                    // final name under generations/
  std::filesystem::path staging_path;  // where it lies until published
  std::shared_ptr<const EnvLock> lock;
  Env* env = nullptr;  // where it lies
};

// A published generation, with what is needed to take it back.
struct Publication {
  PreparedGeneration generation;
  std::optional<std::string> previous;  // CURRENT before the switch
};

// Takes the rank folder's writer lock (refusing the save when another
// writer holds it), writes manifest and shard into a staging folder, fsyncs
// them, and re-reads the shard to check its checksum. The rank folder and
// its generations/ must be real folders, not symbolic links.
Result<PreparedGeneration> prepare_generation(const std::filesystem::path& root, const PromptCacheManifest& manifest,
                                              std::span<const std::byte> shard, Env& env = posix_env());

// Removes a prepared generation that will not be published.
void discard_generation(const PreparedGeneration& generation);

// Renames the generation into generations/ (a reader finds it only
// through CURRENT); the publication it returns can be reverted.
Result<Publication> publish_generation(const PreparedGeneration& generation);

// Switches CURRENT to the published generation. On an error CURRENT may or
// may not have switched (the rename may have happened before the folder's
// sync failed): revert_publication puts it back either way.
Status switch_current(const Publication& publication);

// Makes a publication final: removes every other generation of the rank
// and the staging folders of saves that died before publishing (there is
// one writer at a time, so none of them is still being written).
void commit_publication(const Publication& publication);

// Points CURRENT back to the previous generation (or removes it when there
// was none) and deletes the new generation.
Status revert_publication(const Publication& publication);

// The live generation of `rank`: its manifest, validated against the root.
struct LiveGeneration {
  PromptCacheManifest manifest;
  std::filesystem::path shard_path;
  Env* env = nullptr;  // where it lies
};
Result<LiveGeneration> read_live_generation(const std::filesystem::path& root, int rank, Env& env = posix_env());
// The generation in `folder` (published or staged): its manifest, which
// must name the folder, validated against the root.
Result<LiveGeneration> read_generation(const std::filesystem::path& root, const std::filesystem::path& folder,
                                       Env& env = posix_env());

// Reads the shard of a live generation and checks size and checksum.
Result<std::vector<std::byte>> read_shard(const LiveGeneration& live);

}  // namespace accord
