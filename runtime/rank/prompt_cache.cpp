#include "runtime/rank/prompt_cache.hpp"

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "runtime/io/digest.hpp"
#include "runtime/io/durable_file.hpp"

namespace accord {

namespace fs = std::filesystem;

namespace {

constexpr char kCurrent[] = "CURRENT";
constexpr char kGenerations[] = "generations";
constexpr char kManifest[] = "manifest.json";
constexpr char kShard[] = "kv.bin";  // the shard file every save writes
constexpr char kLock[] = "LOCK";
constexpr char kStagingPrefix[] = ".staging-";
constexpr std::size_t kMaxManifestBytes = 1 << 20;
constexpr std::int64_t kMaxRanks = 4096;

Error cache_error(const std::string& message) { return Error(ErrorCode::prompt_cache, message); }

// Generation and shard names are one plain path component: no separator,
// nothing hidden, so no "." or ".." that could climb out of the root.
bool is_plain_name(const std::string& name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') return false;
  return name.find_first_not_of("0123456789abcdefghijklmnopqrstuvwxyz-_.") == std::string::npos;
}

bool is_hex(std::string_view text, std::size_t max_digits) {
  return !text.empty() && text.size() <= max_digits && text.find_first_not_of("0123456789abcdef") == std::string::npos;
}

std::string_view as_text(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// A manifest field that is present and well typed but out of its range.
struct FieldOutOfRange : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A whole number in [low, high]; fractions, strings and numbers that do
// not fit are refused rather than rounded or wrapped.
std::int64_t whole_number(const nlohmann::json& object, const char* key, std::int64_t low, std::int64_t high) {
  const auto& value = object.at(key);
  const auto fail = [&] {
    throw FieldOutOfRange(std::string("'") + key + "' must be a whole number from " + std::to_string(low) + " to " +
                          std::to_string(high) + ", not " + value.dump());
  };
  if (!value.is_number_integer()) fail();
  if (value.is_number_unsigned() && value.get<std::uint64_t>() > static_cast<std::uint64_t>(high)) fail();
  const auto number = value.get<std::int64_t>();
  if (number < low || number > high) fail();
  return number;
}

std::uint64_t unsigned_number(const nlohmann::json& object, const char* key) {
  const auto& value = object.at(key);
  if (!value.is_number_unsigned()) {
    throw FieldOutOfRange(std::string("'") + key + "' must be a whole number of at least 0, not " + value.dump());
  }
  return value.get<std::uint64_t>();
}

// Removes a generation or staging folder this cache wrote, and only the
// two files it writes there (whatever a manifest may claim). Anything else
// in the folder (a user's file, a link) stays, and so does the folder.
void remove_generation_folder(Env& env, const fs::path& folder) {
  if (env.type_of(folder) != FileType::folder) return;
  for (const char* name : {kShard, kManifest}) {
    const fs::path file = folder / name;
    if (env.type_of(file) == FileType::regular) (void)env.remove(file);
  }
  if (env.entries(folder).empty()) (void)env.remove(folder);  // only when nothing else is left in it
}

// A folder the cache writes into: created when missing, refused when it
// is a symbolic link or not a folder.
Status ensure_real_folder(Env& env, const fs::path& folder) {
  const FileType type = env.type_of(folder);
  if (type == FileType::none || type == FileType::folder) return create_folders_synced(env, folder);
  if (type == FileType::link) {
    return cache_error(folder.string() + " is a symbolic link; the prompt cache writes only into folders of its own");
  }
  return cache_error(folder.string() + " is not a folder");
}

// The root may be a link the user chose; the folders below it are the cache's.
Status ensure_rank_folders(Env& env, const fs::path& root, const fs::path& rank_dir) {
  if (Status ok = create_folders_synced(env, root); !ok) return ok;
  if (Status ok = ensure_real_folder(env, rank_dir); !ok) return ok;
  return ensure_real_folder(env, rank_dir / kGenerations);
}

}  // namespace

fs::path rank_folder(const fs::path& root, int rank) {
  char name[16];
  std::snprintf(name, sizeof name, "rank-%02d", rank);
  return root / name;
}

fs::path generation_folder(const fs::path& rank_dir, const std::string& name) { return rank_dir / kGenerations / name; }

fs::path staging_folder(const fs::path& rank_dir, const std::string& name) {
  return rank_dir / (kStagingPrefix + name);
}

std::string staged_generation(const std::string& entry) {
  if (!entry.starts_with(kStagingPrefix)) return "";
  std::string name = entry.substr(std::strlen(kStagingPrefix));
  return is_generation_name(name) ? name : "";
}

fs::path generations_folder(const fs::path& rank_dir) { return rank_dir / kGenerations; }
fs::path current_file(const fs::path& rank_dir) { return rank_dir / kCurrent; }
fs::path lock_file(const fs::path& rank_dir) { return rank_dir / kLock; }

std::string generation_name(std::uint64_t epoch, const std::string& save_id) {
  return std::to_string(epoch) + "-" + save_id;
}

bool is_generation_name(const std::string& name) {
  const auto dash = name.find('-');
  if (dash == std::string::npos || dash == 0 || dash > 20) return false;
  const std::string_view epoch(name.data(), dash);
  return epoch.find_first_not_of("0123456789") == std::string_view::npos &&
         is_hex(std::string_view(name).substr(dash + 1), 64);
}

Result<std::optional<std::string>> read_current(const fs::path& rank_dir, Env& env) {
  if (env.type_of(rank_dir / kCurrent) == FileType::none) return std::optional<std::string>();
  auto current = env.read_file(rank_dir / kCurrent, 256);
  if (!current) return cache_error("cannot read " + (rank_dir / kCurrent).string() + ": " + current.error().message());
  std::string name(as_text(*current));
  while (!name.empty() && name.back() == '\n') name.pop_back();
  if (!is_plain_name(name)) {
    return cache_error((rank_dir / kCurrent).string() + " names '" + name + "', which is not a generation");
  }
  return std::optional<std::string>(std::move(name));
}

std::string manifest_to_json(const PromptCacheManifest& m) {
  const nlohmann::json json = {
      {"format_version", m.format_version},
      {"arithmetic_version", m.arithmetic_version},
      {"model_identity", m.model_identity},
      {"topology",
       {{"ranks", m.topology.ranks},
        {"rank", m.topology.rank},
        {"first_unit", m.topology.first_unit},
        {"unit_count", m.topology.unit_count}}},
      {"kv_dim", m.kv_dim},
      {"prefix_token_count", m.prefix_token_count},
      {"prefix_sha256", m.prefix_sha256},
      {"descriptor", {{"name", m.descriptor.name}, {"namespace", m.descriptor.cache_namespace}}},
      {"prepared_input", m.prepared_input},
      {"epoch", m.epoch},
      {"save_id", m.save_id},
      {"shards", {{{"file", m.shard_file}, {"bytes", m.shard_bytes}, {"sha256", m.shard_sha256}}}},
  };
  return json.dump(2) + "\n";
}

Result<PromptCacheManifest> manifest_from_json(std::string_view text) {
  constexpr std::int64_t kMaxCount = std::int64_t{1} << 30;  // units, rows, widths: far past any model
  try {
    const auto json = nlohmann::json::parse(text);
    PromptCacheManifest m;
    const auto version = whole_number(json, "format_version", 0, kMaxCount);
    if (version != kPromptCacheFormatVersion) {
      return cache_error("unknown prompt cache format version " + std::to_string(version) +
                         " (this build reads version " + std::to_string(kPromptCacheFormatVersion) + ")");
    }
    if (json.contains("arithmetic_version")) {
      m.arithmetic_version = static_cast<int>(whole_number(json, "arithmetic_version", 1, kMaxCount));
    } else {
      m.arithmetic_version = 1;  // saved before builds recorded it
    }
    m.model_identity = json.at("model_identity").get<std::string>();
    const auto& t = json.at("topology");
    m.topology.ranks = static_cast<int>(whole_number(t, "ranks", 1, kMaxRanks));
    m.topology.rank = static_cast<int>(whole_number(t, "rank", 0, m.topology.ranks - 1));
    m.topology.first_unit = static_cast<int>(whole_number(t, "first_unit", 0, kMaxCount));
    m.topology.unit_count = static_cast<int>(whole_number(t, "unit_count", 1, kMaxCount));
    m.kv_dim = static_cast<int>(whole_number(json, "kv_dim", 1, kMaxCount));
    m.prefix_token_count = static_cast<int>(whole_number(json, "prefix_token_count", 1, kMaxCount));
    m.prefix_sha256 = json.at("prefix_sha256").get<std::string>();
    m.descriptor = {json.at("descriptor").at("name").get<std::string>(),
                    json.at("descriptor").at("namespace").get<std::string>()};
    m.prepared_input = json.at("prepared_input").get<std::string>();
    m.epoch = unsigned_number(json, "epoch");
    m.save_id = json.at("save_id").get<std::string>();
    if (!is_hex(m.save_id, 64)) {
      return cache_error("malformed manifest: 'save_id' must be 1 to 64 lower-case hex digits, not '" + m.save_id +
                         "'");
    }
    const auto& shards = json.at("shards");
    if (!shards.is_array() || shards.size() != 1) return cache_error("the manifest must list exactly one shard");
    m.shard_file = shards[0].at("file").get<std::string>();
    m.shard_bytes = unsigned_number(shards[0], "bytes");
    m.shard_sha256 = shards[0].at("sha256").get<std::string>();
    return m;
  } catch (const nlohmann::json::exception& e) {
    return cache_error(std::string("malformed manifest: ") + e.what());
  } catch (const FieldOutOfRange& e) {
    return cache_error(std::string("malformed manifest: ") + e.what());
  }
}

Result<PreparedGeneration> prepare_generation(const fs::path& root, const PromptCacheManifest& manifest,
                                              std::span<const std::byte> shard, Env& env) {
  PreparedGeneration g;
  g.env = &env;
  g.rank_dir = rank_folder(root, manifest.topology.rank);
  g.name = generation_name(manifest.epoch, manifest.save_id);
  g.staging_path = staging_folder(g.rank_dir, g.name);
  if (Status ok = ensure_rank_folders(env, root, g.rank_dir); !ok) return ok.error();
  auto lock = env.try_lock(g.rank_dir / kLock);
  if (!lock) return lock.error();
  if (!*lock) {
    return cache_error("another writer is saving into " + g.rank_dir.string() + " (it holds " + kLock +
                       "); this save is skipped");
  }
  g.lock = std::shared_ptr<const EnvLock>(std::move(*lock));
  remove_generation_folder(env, g.staging_path);  // a dead save's, by the same name
  if (Status ok = env.create_folder(g.staging_path); !ok) return ok.error();

  const std::string text = manifest_to_json(manifest);
  Status written = write_file_synced(env, g.staging_path / manifest.shard_file, shard);
  if (written) written = write_file_synced(env, g.staging_path / kManifest, std::as_bytes(std::span(text)));
  if (written) written = env.sync_folder(g.staging_path);
  if (!written) {
    discard_generation(g);
    return written.error();
  }
  // Read back what reached the file system: a short write or a bad disk
  // shows here, before anything is published.
  auto reread = env.read_file(g.staging_path / manifest.shard_file, manifest.shard_bytes);
  if (!reread || sha256_hex(*reread) != manifest.shard_sha256) {
    discard_generation(g);
    return cache_error("the shard written to " + g.staging_path.string() + " does not read back intact");
  }
  return g;
}

void discard_generation(const PreparedGeneration& generation) {
  remove_generation_folder(*generation.env, generation.staging_path);
}

Result<Publication> publish_generation(const PreparedGeneration& generation) {
  Env& env = *generation.env;
  // What CURRENT names now is what an abort puts back: without it, no
  // publication (taking an unreadable CURRENT for none would delete the
  // live generation's name on abort).
  auto current = read_current(generation.rank_dir, env);
  if (!current) return current.error();
  Publication p{generation, *current};
  const fs::path final_path = generation_folder(generation.rank_dir, generation.name);
  if (Status s = env.rename(generation.staging_path, final_path); !s) return s.error();
  return p;
}

Status switch_current(const Publication& publication) {
  const PreparedGeneration& generation = publication.generation;
  Env& env = *generation.env;
  if (Status s = env.sync_folder(generation.rank_dir / kGenerations); !s) return s;
  return replace_file_atomically(env, generation.rank_dir / kCurrent, generation.name + "\n");
}

void commit_publication(const Publication& publication) {
  const fs::path& dir = publication.generation.rank_dir;
  Env& env = *publication.generation.env;
  for (const std::string& name : env.entries(dir / kGenerations)) {
    if (name != publication.generation.name && is_generation_name(name)) {
      remove_generation_folder(env, generation_folder(dir, name));
    }
  }
  for (const std::string& entry : env.entries(dir)) {
    if (!staged_generation(entry).empty()) remove_generation_folder(env, dir / entry);
  }
}

Status revert_publication(const Publication& publication) {
  const fs::path& dir = publication.generation.rank_dir;
  Env& env = *publication.generation.env;
  // CURRENT still naming what it named before the publication never
  // switched (switch_current failed before its rename): nothing to put back.
  auto current = read_current(dir, env);
  if (current && *current == publication.previous) {
    remove_generation_folder(env, generation_folder(dir, publication.generation.name));
    return {};
  }
  if (publication.previous) {
    if (Status s = replace_file_atomically(env, dir / kCurrent, *publication.previous + "\n"); !s) return s;
  } else {
    if (Status s = env.remove(dir / kCurrent); !s) return s;
    if (Status s = env.sync_folder(dir); !s) return s;
  }
  remove_generation_folder(env, generation_folder(dir, publication.generation.name));
  return {};
}

Result<LiveGeneration> read_live_generation(const fs::path& root, int rank, Env& env) {
  const fs::path dir = rank_folder(root, rank);
  auto current = read_current(dir, env);
  if (!current) return current.error();
  if (!*current) return cache_error("no prompt cache at " + dir.string() + " (it has no CURRENT)");
  return read_generation(root, generation_folder(dir, **current), env);
}

Result<LiveGeneration> read_generation(const fs::path& root, const fs::path& folder, Env& env) {
  auto inside = resolves_inside(env, root, folder / kManifest);
  if (!inside) return cache_error("cannot open the generation " + folder.string() + ": " + inside.error().message());
  if (!*inside) return cache_error("the generation " + folder.string() + " leaves the cache root " + root.string());
  auto text = env.read_file(folder / kManifest, kMaxManifestBytes);
  if (!text) return cache_error("cannot read the manifest of " + folder.string() + ": " + text.error().message());
  auto manifest = manifest_from_json(as_text(*text));
  if (!manifest) return Error(ErrorCode::prompt_cache, folder.string() + ": " + manifest.error().message());
  if (!is_plain_name(manifest->shard_file)) {
    return cache_error("the manifest names the shard '" + manifest->shard_file + "', which leaves its generation");
  }
  const std::string name = generation_name(manifest->epoch, manifest->save_id);
  const std::string folder_name = folder.filename().string();
  if (folder_name != name && folder_name != kStagingPrefix + name) {
    return cache_error("the manifest in " + folder.string() + " is of the generation " + name);
  }
  const fs::path shard = folder / manifest->shard_file;
  auto shard_inside = resolves_inside(env, root, shard);
  if (!shard_inside)
    return cache_error("cannot open the shard " + shard.string() + ": " + shard_inside.error().message());
  if (!*shard_inside) return cache_error("the shard " + shard.string() + " leaves the cache root");
  return LiveGeneration{std::move(*manifest), shard, &env};
}

Result<std::vector<std::byte>> read_shard(const LiveGeneration& live) {
  auto size = live.env->file_size(live.shard_path);
  if (!size) return cache_error("cannot read the shard " + live.shard_path.string() + ": " + size.error().message());
  if (*size != live.manifest.shard_bytes) {
    return cache_error("the shard " + live.shard_path.string() + " is " + std::to_string(*size) +
                       " bytes, the manifest says " + std::to_string(live.manifest.shard_bytes));
  }
  auto bytes = live.env->read_file(live.shard_path, live.manifest.shard_bytes);
  if (!bytes) return cache_error(bytes.error().message());
  if (sha256_hex(*bytes) != live.manifest.shard_sha256) {
    return cache_error("the shard " + live.shard_path.string() + " fails its SHA-256 check: it is corrupted");
  }
  return bytes;
}

}  // namespace accord
