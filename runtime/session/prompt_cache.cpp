#include "runtime/session/prompt_cache.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "runtime/io/digest.hpp"
#include "runtime/io/durable_file.hpp"

namespace accord {

namespace fs = std::filesystem;

namespace {

constexpr char kCurrent[] = "CURRENT";
constexpr char kGenerations[] = "generations";
constexpr char kManifest[] = "manifest.json";
constexpr std::size_t kMaxManifestBytes = 1 << 20;

Error cache_error(const std::string& message) { return Error(ErrorCode::prompt_cache, message); }

// Generation and shard names are one plain path component: no separator,
// nothing hidden, so no "." or ".." that could climb out of the root.
bool is_plain_name(const std::string& name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') return false;
  return name.find_first_not_of("0123456789abcdefghijklmnopqrstuvwxyz-_.") == std::string::npos;
}

std::string_view as_text(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

}  // namespace

fs::path rank_folder(const fs::path& root, int rank) {
  char name[16];
  std::snprintf(name, sizeof name, "rank-%02d", rank);
  return root / name;
}

fs::path generation_folder(const fs::path& rank_dir, const std::string& name) { return rank_dir / kGenerations / name; }

std::string manifest_to_json(const PromptCacheManifest& m) {
  const nlohmann::json json = {
      {"format_version", m.format_version},
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
  try {
    const auto json = nlohmann::json::parse(text);
    PromptCacheManifest m;
    m.format_version = json.at("format_version").get<int>();
    if (m.format_version != kPromptCacheFormatVersion) {
      return cache_error("unknown prompt cache format version " + std::to_string(m.format_version) +
                         " (this build reads version " + std::to_string(kPromptCacheFormatVersion) + ")");
    }
    m.model_identity = json.at("model_identity").get<std::string>();
    const auto& t = json.at("topology");
    m.topology = {t.at("ranks").get<int>(), t.at("rank").get<int>(), t.at("first_unit").get<int>(),
                  t.at("unit_count").get<int>()};
    m.kv_dim = json.at("kv_dim").get<int>();
    m.prefix_token_count = json.at("prefix_token_count").get<int>();
    m.prefix_sha256 = json.at("prefix_sha256").get<std::string>();
    m.descriptor = {json.at("descriptor").at("name").get<std::string>(),
                    json.at("descriptor").at("namespace").get<std::string>()};
    m.prepared_input = json.at("prepared_input").get<std::string>();
    m.epoch = json.at("epoch").get<std::uint64_t>();
    m.save_id = json.at("save_id").get<std::string>();
    const auto& shards = json.at("shards");
    if (!shards.is_array() || shards.size() != 1) return cache_error("the manifest must list exactly one shard");
    m.shard_file = shards[0].at("file").get<std::string>();
    m.shard_bytes = shards[0].at("bytes").get<std::uint64_t>();
    m.shard_sha256 = shards[0].at("sha256").get<std::string>();
    return m;
  } catch (const nlohmann::json::exception& e) {
    return cache_error(std::string("malformed manifest: ") + e.what());
  }
}

Result<PreparedGeneration> prepare_generation(const fs::path& root, const PromptCacheManifest& manifest,
                                              std::span<const std::byte> shard) {
  PreparedGeneration g;
  g.rank_dir = rank_folder(root, manifest.topology.rank);
  g.name = std::to_string(manifest.epoch) + "-" + manifest.save_id;
  g.staging_path = g.rank_dir / (".staging-" + g.name);
  std::error_code ec;
  fs::create_directories(g.rank_dir / kGenerations, ec);
  if (ec) return Error(ErrorCode::io, "cannot create " + (g.rank_dir / kGenerations).string() + ": " + ec.message());
  fs::remove_all(g.staging_path, ec);
  fs::create_directory(g.staging_path, ec);
  if (ec) return Error(ErrorCode::io, "cannot create " + g.staging_path.string() + ": " + ec.message());

  const std::string text = manifest_to_json(manifest);
  Status written = write_file_synced(g.staging_path / manifest.shard_file, shard);
  if (written) {
    written = write_file_synced(g.staging_path / kManifest, {reinterpret_cast<const std::byte*>(text.data()), text.size()});
  }
  if (written) written = sync_folder(g.staging_path);
  if (!written) {
    discard_generation(g);
    return written.error();
  }
  // Read back what reached the file system: a short write or a bad disk
  // shows here, before anything is published.
  auto reread = read_file(g.staging_path / manifest.shard_file, manifest.shard_bytes);
  if (!reread || sha256_hex(*reread) != manifest.shard_sha256) {
    discard_generation(g);
    return cache_error("the shard written to " + g.staging_path.string() + " does not read back intact");
  }
  return g;
}

void discard_generation(const PreparedGeneration& generation) {
  std::error_code ignored;
  fs::remove_all(generation.staging_path, ignored);
}

Result<Publication> publish_generation(const PreparedGeneration& generation) {
  Publication p{generation, std::nullopt};
  if (auto current = read_file(generation.rank_dir / kCurrent, 256)) {
    std::string name(as_text(*current));
    while (!name.empty() && name.back() == '\n') name.pop_back();
    p.previous = name;
  }
  const fs::path final_path = generation_folder(generation.rank_dir, generation.name);
  std::error_code ec;
  fs::rename(generation.staging_path, final_path, ec);
  if (ec) return Error(ErrorCode::io, "cannot publish " + final_path.string() + ": " + ec.message());
  if (Status s = sync_folder(generation.rank_dir / kGenerations); !s) return s.error();
  if (Status s = replace_file_atomically(generation.rank_dir / kCurrent, generation.name + "\n"); !s) {
    fs::remove_all(final_path, ec);
    return s.error();
  }
  return p;
}

void commit_publication(const Publication& publication) {
  std::error_code ec;
  const fs::path& dir = publication.generation.rank_dir;
  for (const auto& entry : fs::directory_iterator(dir / kGenerations, ec)) {
    if (entry.path().filename() != publication.generation.name) fs::remove_all(entry.path(), ec);
  }
  // Staging folders left by saves that died before publishing (there is
  // one writer at a time, so none of them is still being written).
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().starts_with(".staging-")) fs::remove_all(entry.path(), ec);
  }
}

Status revert_publication(const Publication& publication) {
  const fs::path& dir = publication.generation.rank_dir;
  std::error_code ec;
  if (publication.previous) {
    if (Status s = replace_file_atomically(dir / kCurrent, *publication.previous + "\n"); !s) return s;
  } else {
    fs::remove(dir / kCurrent, ec);
    if (ec) return Error(ErrorCode::io, "cannot remove " + (dir / kCurrent).string() + ": " + ec.message());
  }
  fs::remove_all(generation_folder(dir, publication.generation.name), ec);
  return {};
}

Result<LiveGeneration> read_live_generation(const fs::path& root, int rank) {
  const fs::path dir = rank_folder(root, rank);
  auto current = read_file(dir / kCurrent, 256);
  if (!current) return cache_error("no prompt cache at " + dir.string() + " (" + current.error().message() + ")");
  std::string name(as_text(*current));
  while (!name.empty() && name.back() == '\n') name.pop_back();
  if (!is_plain_name(name)) return cache_error(dir.string() + "/CURRENT names '" + name + "', which is not a generation");
  const fs::path generation = generation_folder(dir, name);
  if (!stays_inside(root, generation / kManifest)) {
    return cache_error("the generation " + generation.string() + " leaves the cache root " + root.string());
  }
  auto text = read_file(generation / kManifest, kMaxManifestBytes);
  if (!text) return cache_error("cannot read the manifest of " + generation.string() + ": " + text.error().message());
  auto manifest = manifest_from_json(as_text(*text));
  if (!manifest) return manifest.error();
  if (!is_plain_name(manifest->shard_file)) {
    return cache_error("the manifest names the shard '" + manifest->shard_file + "', which leaves its generation");
  }
  const fs::path shard = generation / manifest->shard_file;
  if (!stays_inside(root, shard)) return cache_error("the shard " + shard.string() + " leaves the cache root");
  return LiveGeneration{std::move(*manifest), shard};
}

Result<std::vector<std::byte>> read_shard(const LiveGeneration& live) {
  std::error_code ec;
  const auto size = fs::file_size(live.shard_path, ec);
  if (ec) return cache_error("cannot read the shard " + live.shard_path.string() + ": " + ec.message());
  if (size != live.manifest.shard_bytes) {
    return cache_error("the shard " + live.shard_path.string() + " is " + std::to_string(size) +
                       " bytes, the manifest says " + std::to_string(live.manifest.shard_bytes));
  }
  auto bytes = read_file(live.shard_path, live.manifest.shard_bytes);
  if (!bytes) return cache_error(bytes.error().message());
  if (sha256_hex(*bytes) != live.manifest.shard_sha256) {
    return cache_error("the shard " + live.shard_path.string() + " fails its SHA-256 check: it is corrupted");
  }
  return bytes;
}

}  // namespace accord
