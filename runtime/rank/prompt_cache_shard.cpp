#include "runtime/rank/prompt_cache_shard.hpp"

#include <algorithm>
#include <cstring>
#include <random>

#include "runtime/io/digest.hpp"

namespace accord {

namespace {

Error refuse(const std::string& why) { return Error(ErrorCode::prompt_cache, why); }

Error other_rank_count(int cache_ranks, int session_ranks) {
  return refuse("the cache was saved with " + std::to_string(cache_ranks) + " rank(s); this session has " +
                std::to_string(session_ranks) + " rank(s)");
}

std::string unit_span(const PromptCacheTopology& t) {
  return "units " + std::to_string(t.first_unit) + ".." + std::to_string(t.first_unit + t.unit_count - 1);
}

Status check_topology(const PromptCacheTopology& saved, const PromptCacheTopology& mine) {
  if (saved.ranks != mine.ranks) return other_rank_count(saved.ranks, mine.ranks);
  if (!(saved == mine)) {
    return refuse("the cache's rank " + std::to_string(saved.rank) + " holds " + unit_span(saved) +
                  "; this session's rank " + std::to_string(mine.rank) + " holds " + unit_span(mine));
  }
  return {};
}

// A rank whose folder holds no cache may be one past the ranks of the save:
// rank 0's manifest then says so in the words a user needs.
Error explain_missing_generation(const PromptCacheRequest& request, const ShardIdentity& identity, Error missing,
                                 Env& env) {
  if (identity.topology.rank == 0) return missing;
  auto first = read_live_generation(request.root, 0, env);
  if (first && first->manifest.topology.ranks != identity.topology.ranks) {
    return other_rank_count(first->manifest.topology.ranks, identity.topology.ranks);
  }
  return missing;
}

}  // namespace

std::string new_save_id() {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::random_device random;
  std::uint64_t v = (static_cast<std::uint64_t>(random()) << 32) | random();
  std::string hex(16, '0');
  for (char& c : hex) {
    c = kDigits[v & 0xF];
    v >>= 4;
  }
  return hex;
}

std::size_t ShardIdentity::shard_floats(int rows) const {
  return static_cast<std::size_t>(topology.unit_count) * 2 * static_cast<std::size_t>(rows) *
         static_cast<std::size_t>(kv_dim);
}

ShardIdentity shard_identity(const std::string& model_identity, const ModelConfig& config, int ranks, int rank,
                             const UnitRange& units) {
  return {model_identity, {ranks, rank, units.first, units.count}, config.kv_dim(), config.seq_len};
}

Status check_prefix_held(const SessionState& state, std::span<const int> prefix) {
  const auto held = state.tokens();
  if (prefix.empty() || prefix.size() > held.size() || !std::equal(prefix.begin(), prefix.end(), held.begin())) {
    return Error(ErrorCode::contract, "the prefix to save is not the start of the session's tokens");
  }
  return {};
}

std::vector<float> pack_shard(const SessionState& state, int rows) {
  const KvStore& kv = state.kv();
  std::vector<float> shard;
  shard.reserve(static_cast<std::size_t>(rows) * kv.kv_dim() * 2 * static_cast<std::size_t>(kv.unit_count()));
  for (int u = kv.first_unit(); u < kv.first_unit() + kv.unit_count(); ++u) {
    kv.view_rows(u, 0, rows, [&](std::span<const float> keys, std::span<const float> values) {
      shard.insert(shard.end(), keys.begin(), keys.end());
      shard.insert(shard.end(), values.begin(), values.end());
    });
  }
  return shard;
}

void install_shard(SessionState& state, std::span<const float> shard, std::span<const int> prefix,
                   std::uint64_t epoch) {
  KvStore& kv = state.kv();
  const auto floats = prefix.size() * static_cast<std::size_t>(kv.kv_dim());
  const float* in = shard.data();
  for (int u = kv.first_unit(); u < kv.first_unit() + kv.unit_count(); ++u) {
    kv.write_rows(u, 0, static_cast<int>(prefix.size()), in, in + floats);
    in += 2 * floats;
  }
  state.commit_rows(0, prefix, epoch);
}

Status check_manifest(const PromptCacheManifest& m, const ShardIdentity& identity, const PromptCacheRequest& request) {
  if (m.model_identity != identity.model_identity) {
    return refuse("the cache was saved by another model (identity " + m.model_identity + ", this model is " +
                  identity.model_identity + ")");
  }
  if (m.arithmetic_version != cpu::kArithmeticVersion) {
    return refuse("the cache was computed by version " + std::to_string(m.arithmetic_version) +
                  " of the kernels' arithmetic; this build computes version " +
                  std::to_string(cpu::kArithmeticVersion) + ", whose low bits differ: prefill it again");
  }
  if (Status ok = check_topology(m.topology, identity.topology); !ok) return ok;
  if (m.kv_dim != identity.kv_dim) return refuse("the cache's KV width differs from the model's");
  const PromptCacheDescriptor& expected = request.descriptor;
  if (!(m.descriptor == expected)) {
    return refuse("the cache was saved as '" + m.descriptor.name + "' in namespace '" + m.descriptor.cache_namespace +
                  "', not as '" + expected.name + "' in '" + expected.cache_namespace + "'");
  }
  if (m.prepared_input != request.prepared_input) return refuse("the cache was saved for another prepared input");
  const auto& prefix = request.prefix;
  if (m.prefix_token_count != static_cast<int>(prefix.size()) || m.prefix_sha256 != token_ids_sha256(prefix)) {
    return refuse("the cache holds other prefix tokens (" + std::to_string(m.prefix_token_count) +
                  " tokens) than the " + std::to_string(prefix.size()) + " given");
  }
  if (m.prefix_token_count < 1 || m.prefix_token_count > identity.context) {
    return refuse("the cache's prefix length is outside the model's context");
  }
  return {};
}

// --- ShardSave -----------------------------------------------------------------

Status ShardSave::prepare(const ShardIdentity& identity, const PromptCacheRequest& request, std::uint64_t epoch,
                          const std::string& save_id, std::span<const float> shard, Env& env) {
  // The id becomes part of a folder name: plain characters only.
  if (save_id.empty() || save_id.size() > 64 || save_id.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return Error(ErrorCode::contract, "the save id '" + save_id + "' is not 1 to 64 lower-case hex digits");
  }
  const auto bytes = std::as_bytes(shard);
  manifest_.model_identity = identity.model_identity;
  manifest_.topology = identity.topology;
  manifest_.kv_dim = identity.kv_dim;
  manifest_.prefix_token_count = static_cast<int>(request.prefix.size());
  manifest_.prefix_sha256 = token_ids_sha256(request.prefix);
  manifest_.descriptor = request.descriptor;
  manifest_.prepared_input = request.prepared_input;
  manifest_.epoch = epoch;
  manifest_.save_id = save_id;
  manifest_.shard_bytes = bytes.size();
  manifest_.shard_sha256 = sha256_hex(bytes);
  auto prepared = prepare_generation(request.root, manifest_, bytes, env);
  if (!prepared) return prepared.error();
  prepared_ = std::move(*prepared);
  return {};
}

Status ShardSave::publish() {
  auto published = publish_generation(*prepared_);
  if (!published) return published.error();
  publication_ = std::move(*published);
  return switch_current(*publication_);
}

void ShardSave::commit() { commit_publication(*publication_); }

std::filesystem::path ShardSave::shard_path() const {
  if (!prepared_) return {};
  const auto folder = publication_ ? generation_folder(prepared_->rank_dir, prepared_->name) : prepared_->staging_path;
  return folder / manifest_.shard_file;
}

Status ShardSave::revert() {
  if (publication_) return revert_publication(*publication_);
  if (prepared_) discard_generation(*prepared_);
  return {};
}

// --- ShardLoad -----------------------------------------------------------------

Status ShardLoad::preflight(const ShardIdentity& identity, const PromptCacheRequest& request, Env& env) {
  auto live = read_live_generation(request.root, identity.topology.rank, env);
  if (!live) return explain_missing_generation(request, identity, live.error(), env);
  if (Status ok = check_manifest(live->manifest, identity, request); !ok) return ok;
  live_ = std::move(*live);
  return {};
}

Result<std::vector<float>> ShardLoad::read(const ShardIdentity& identity, const std::string& save_id) const {
  if (live_->manifest.save_id != save_id) {
    return refuse("rank " + std::to_string(identity.topology.rank) + "'s cache belongs to save " +
                  live_->manifest.save_id + ", rank 0's to save " + save_id + ": the ranks hold two different saves");
  }
  auto bytes = read_shard(*live_);
  if (!bytes) return bytes.error();
  const std::size_t expected = identity.shard_floats(live_->manifest.prefix_token_count) * sizeof(float);
  if (bytes->size() != expected) {
    return refuse("the shard is " + std::to_string(bytes->size()) + " bytes; the prefix needs " +
                  std::to_string(expected));
  }
  std::vector<float> shard(expected / sizeof(float));
  std::memcpy(shard.data(), bytes->data(), expected);
  return shard;
}

}  // namespace accord
