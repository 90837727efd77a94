#include "runtime/model/identity.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <thread>

#include "runtime/io/digest.hpp"

namespace accord {

namespace {

// Weights are digested and checked a chunk at a time, so the check reads
// what the digest just brought into the cache: one pass over memory.
constexpr std::size_t kChunk = 4096;

// Whether any of `data[0..n)`, n <= kChunk, is NaN or infinite. Counting
// instead of stopping at the first lets the loop vectorize (twice as fast
// as a bool reduction here).
bool any_non_finite(const float* data, std::size_t n) {
  std::uint32_t count = 0;
  for (std::size_t i = 0; i < n; ++i) count += !(std::fabs(data[i]) <= std::numeric_limits<float>::max());
  return count != 0;
}

// Names the tensor, the first bad element and its value.
Error non_finite_error(const std::string& name, const std::string& tensor, const WeightPiece& piece) {
  const float* bad = std::find_if(piece.data, piece.data + piece.count, [](float v) { return !std::isfinite(v); });
  return Error(ErrorCode::format, name + ": tensor " + tensor + " holds " + std::to_string(*bad) + " at element " +
                                      std::to_string(piece.first + static_cast<std::size_t>(bad - piece.data)) +
                                      " of " + std::to_string(piece.total) +
                                      "; a model's weights must be finite numbers");
}

// One tensor's digest, or the error of its first weight that is not finite.
struct TensorResult {
  std::string digest;
  std::optional<Error> failure;
};

// Unmaps the rows of `matrix` up to the end of `piece` (release_mapped_pages).
void release_rows_read(const cpu::Matrix& matrix, const WeightPiece& piece) {
  const std::size_t row_bytes = matrix.bytes() / static_cast<std::size_t>(matrix.rows);
  const std::size_t rows_read = (piece.first + piece.count) / static_cast<std::size_t>(matrix.cols);
  release_mapped_pages(static_cast<const std::byte*>(matrix.data), rows_read * row_bytes);
}

// `release`: the tensor lies in a file mapping and steps use only a few of
// its rows, so its pages go as soon as they are digested.
TensorResult digest_tensor(const WeightTensor& tensor, bool release, const std::string& name,
                           const TensorNamer& tensor_name) {
  FastDigest digest;
  std::vector<float> scratch;
  TensorResult result;
  for_each_piece(tensor, scratch, [&](const WeightPiece& piece) {
    if (result.failure) return;
    for (std::size_t start = 0; start < piece.count; start += kChunk) {
      const std::size_t n = std::min(kChunk, piece.count - start);
      digest.update(piece.data + start, n * sizeof(float));
      if (any_non_finite(piece.data + start, n)) {
        result.failure = non_finite_error(name, tensor_name(piece.id), piece);
        return;
      }
    }
    if (release) release_rows_read(*tensor.matrix, piece);
  });
  if (!result.failure) result.digest = digest.hex();
  return result;
}

// One entry of a model's digest list and what it digests: a tensor, or
// one expert's rows of a routed block's expert stack.
struct DigestPart {
  std::size_t index;  // in the digest list
  WeightTensor tensor;
};

// The entries of a model's digest list, in canonical order: each weight,
// but each expert of an expert stack apart, so that ranks holding
// different experts of a block each read and digest only theirs.
struct DigestEntry {
  WeightId id;
  int expert = -1;  // of an expert stack; -1: the whole tensor
};
std::vector<DigestEntry> digest_entries(const ModelConfig& c) {
  std::vector<DigestEntry> entries;
  for (const WeightId& id : canonical_weights(c)) {
    if (!is_expert_stack(c, id.kind)) {
      entries.push_back({id});
      continue;
    }
    for (int expert = 0; expert < c.n_experts; ++expert) entries.push_back({id, expert});
  }
  return entries;
}

// What `tensors` (weight_tensors, canonical order) come to as entries of
// the digest list: an expert stack's held experts each apart.
std::vector<DigestPart> digest_parts(const ModelConfig& c, const std::vector<WeightTensor>& tensors) {
  const std::vector<DigestEntry> entries = digest_entries(c);
  std::vector<DigestPart> parts;
  std::size_t at = 0;
  for (const WeightTensor& tensor : tensors) {
    while (!(entries[at].id == tensor.id)) ++at;
    if (!is_expert_stack(c, tensor.id.kind)) {
      parts.push_back({at, tensor});
      continue;
    }
    const int expert_rows = tensor.matrix->rows / c.n_experts;
    for (int row = tensor.first_row; row < tensor.first_row + tensor.rows; row += expert_rows) {
      WeightTensor expert = tensor;
      expert.first_row = row;
      expert.rows = expert_rows;
      parts.push_back({at + static_cast<std::size_t>(row / expert_rows), expert});
    }
  }
  return parts;
}

// Digests `parts` on `threads` threads, each taking the next part not yet
// taken.
std::vector<TensorResult> digest_each(const ModelContents& contents, const std::vector<DigestPart>& parts,
                                      const ModelLoad& load, const std::string& name, const TensorNamer& tensor_name) {
  // Rank 0 looks up a few rows of the embedding each step; unless it is
  // also the classifier, nothing else reads it.
  const ModelConfig& c = contents.config;
  const bool lookup_only = embedding_is_lookup_only(c, load.scope);
  std::vector<TensorResult> results(parts.size());
  std::atomic<std::size_t> next{0};
  std::uint64_t total = 0, done = 0;
  for (const DigestPart& part : parts) total += part.tensor.bytes();
  std::mutex progress_mutex;
  auto work = [&] {
    for (std::size_t i = next++; i < parts.size(); i = next++) {
      const WeightTensor& tensor = parts[i].tensor;
      const bool release = load.mapped && lookup_only && tensor.id.kind == WeightKind::token_embedding;
      results[i] = digest_tensor(tensor, release, name, tensor_name);
      if (!load.progress) continue;
      std::lock_guard lock(progress_mutex);
      done += tensor.bytes();
      load.progress(done, total);
    }
  };
  std::vector<std::thread> helpers;
  const auto extra = std::min<std::size_t>(static_cast<std::size_t>(std::max(load.threads, 1)) - 1, parts.size());
  for (std::size_t t = 0; t < extra; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& helper : helpers) helper.join();
  return results;
}

// How errors name a weight whatever the format: "wq of layer 3".
std::string weight_name(WeightId id) {
  static const char* const names[] = {"the token embedding",
                                      "rms_att",
                                      "wq",
                                      "wk",
                                      "wv",
                                      "wo",
                                      "rms_ffn",
                                      "w1",
                                      "w2",
                                      "w3",
                                      "the final norm",
                                      "the classifier",
                                      "the RoPE frequency factors",
                                      "bq",
                                      "bk",
                                      "bv",
                                      "q_norm",
                                      "k_norm",
                                      "post_att_norm",
                                      "post_ffn_norm",
                                      "the router"};
  const std::string kind = names[static_cast<std::size_t>(id.kind)];
  return id.layer < 0 ? kind : kind + " of layer " + std::to_string(id.layer);
}

}  // namespace

std::size_t digest_count(const ModelConfig& config) { return digest_entries(config).size(); }

std::string digest_name(const ModelConfig& config, std::size_t index) {
  const DigestEntry entry = digest_entries(config).at(index);
  const std::string weight = weight_name(entry.id);
  return entry.expert < 0 ? weight : "expert " + std::to_string(entry.expert) + " of " + weight;
}

Status identify(ModelContents& contents, std::span<const std::byte> bytes, const std::string& name,
                const TensorNamer& tensor_name, const ModelLoad& load) {
  const ModelConfig& c = contents.config;
  contents.scope = load.scope;
  const auto tensors = weight_tensors(c, contents.weights, contents.scope);
  if (load.mapped && !load.scope.holds_everything(c)) confine_mapping(bytes, tensor_ranges(tensors, bytes));
  const std::vector<DigestPart> parts = digest_parts(c, tensors);
  auto results = digest_each(contents, parts, load, name, tensor_name);
  contents.tensor_digests.assign(digest_count(c), std::string());
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (results[i].failure) return *results[i].failure;
    contents.tensor_digests[parts[i].index] = std::move(results[i].digest);
  }
  if (!contents.scope.holds_everything(c)) return {};
  auto identity = combine_identity(c, contents.tensor_digests);
  if (!identity) return identity.error();
  contents.identity = std::move(*identity);
  return {};
}

Result<std::string> combine_identity(const ModelConfig& c, const std::vector<std::string>& digests) {
  if (digests.size() != digest_count(c)) {
    return Error(ErrorCode::contract, "a model of this shape has " + std::to_string(digest_count(c)) +
                                          " digests, not " + std::to_string(digests.size()));
  }
  FastDigest digest;
  digest.update("accord-model-identity-2", 23);
  for (int field : {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len}) {
    digest.update_value(field);
  }
  digest.update_value(c.rope_theta).update_value(c.norm_eps).update_value(c.shared_classifier);
  // What other architectures add; a Llama model's identity stays the one
  // accord always gave it (its RoPE factors, when present, are a tensor).
  if (c.arch != Arch::llama || c.head_dim > 0 || c.rope_scale != 1.0f || c.rope_freq_scale != 1.0f || c.routed()) {
    const std::string_view arch = c.architecture().name;
    digest.update(arch.data(), arch.size());
    digest.update_value(c.head_size()).update_value(c.sliding_window).update_value(c.rope_scale);
    digest.update_value(c.rope_theta_sliding).update_value(c.rope_freq_scale);
  }
  // How many experts route a token changes the model but no tensor.
  if (c.routed()) digest.update_value(c.n_experts).update_value(c.n_experts_used);
  for (std::size_t i = 0; i < digests.size(); ++i) {
    if (digests[i].size() != 32) {
      return Error(ErrorCode::contract, "no digest of " + digest_name(c, i) + " was given");
    }
    digest.update(digests[i].data(), digests[i].size());
  }
  return digest.hex();
}

std::optional<std::size_t> merge_digests(std::vector<std::string>& into, const std::vector<std::string>& shard) {
  const std::size_t n = std::min(into.size(), shard.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (!shard[i].empty() && !into[i].empty() && shard[i] != into[i]) return i;
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (!shard[i].empty()) into[i] = shard[i];
  }
  return std::nullopt;
}

std::string model_identity(const Model& model) { return model.identity(); }

}  // namespace accord
