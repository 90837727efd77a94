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

// Lets go of the pages of the experts a scope does not hold in the expert
// stacks it digested whole (WeightScope::experts): steps never read them.
void release_other_experts(const ModelConfig& c, const WeightScope& scope, const std::vector<WeightTensor>& tensors) {
  if (scope.experts.empty()) return;
  for (const WeightTensor& tensor : tensors) {
    if (!is_expert_stack(c, tensor.id.kind)) continue;
    const cpu::Matrix& stack = *tensor.matrix;
    const std::size_t expert_bytes = stack.bytes() / static_cast<std::size_t>(c.n_experts);
    const ExpertRange held = scope.experts_of(tensor.id.layer, c.n_experts);
    const auto* begin = static_cast<const std::byte*>(stack.data);
    release_mapped_pages(begin, static_cast<std::size_t>(held.first) * expert_bytes);
    const std::size_t kept_end = static_cast<std::size_t>(held.end()) * expert_bytes;
    release_mapped_pages(begin + kept_end, stack.bytes() - kept_end);
  }
}

// What a tensor takes as stored.
std::uint64_t tensor_bytes(const WeightTensor& tensor) {
  return tensor.matrix != nullptr ? tensor.matrix->bytes() : tensor.length * sizeof(float);
}

// Digests `tensors` on `threads` threads, each taking the next tensor not
// yet taken.
std::vector<TensorResult> digest_tensors(const ModelContents& contents, const std::vector<WeightTensor>& tensors,
                                         const ModelLoad& load, const std::string& name,
                                         const TensorNamer& tensor_name) {
  // Rank 0 looks up a few rows of the embedding each step; unless it is
  // also the classifier, nothing else reads it.
  const ModelConfig& c = contents.config;
  const bool lookup_only = embedding_is_lookup_only(c, load.scope);
  std::vector<TensorResult> results(tensors.size());
  std::atomic<std::size_t> next{0};
  std::uint64_t total = 0, done = 0;
  for (const WeightTensor& tensor : tensors) total += tensor_bytes(tensor);
  std::mutex progress_mutex;
  auto work = [&] {
    for (std::size_t i = next++; i < tensors.size(); i = next++) {
      const bool release = load.mapped && lookup_only && tensors[i].id.kind == WeightKind::token_embedding;
      results[i] = digest_tensor(tensors[i], release, name, tensor_name);
      if (!load.progress) continue;
      std::lock_guard lock(progress_mutex);
      done += tensor_bytes(tensors[i]);
      load.progress(done, total);
    }
  };
  std::vector<std::thread> helpers;
  const auto extra = std::min<std::size_t>(static_cast<std::size_t>(std::max(load.threads, 1)) - 1, tensors.size());
  for (std::size_t t = 0; t < extra; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& helper : helpers) helper.join();
  return results;
}

}  // namespace

std::size_t tensor_count(const ModelConfig& config) { return canonical_weights(config).size(); }

WeightId weight_at(const ModelConfig& config, std::size_t index) { return canonical_weights(config).at(index); }

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

Status identify(ModelContents& contents, std::span<const std::byte> bytes, const std::string& name,
                const TensorNamer& tensor_name, const ModelLoad& load) {
  const ModelConfig& c = contents.config;
  contents.scope = load.scope;
  const auto tensors = weight_tensors(c, contents.weights, contents.scope);
  if (load.mapped && !load.scope.holds_everything(c)) confine_mapping(bytes, tensor_ranges(tensors, bytes));
  auto results = digest_tensors(contents, tensors, load, name, tensor_name);
  if (load.mapped) release_other_experts(c, contents.scope, tensors);
  // The scope's tensors are a subsequence of the canonical order.
  const std::vector<WeightId> all = canonical_weights(c);
  contents.tensor_digests.assign(all.size(), std::string());
  std::size_t at = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (results[i].failure) return *results[i].failure;
    while (!(all[at] == tensors[i].id)) ++at;
    contents.tensor_digests[at] = std::move(results[i].digest);
  }
  if (!contents.scope.holds_everything(c)) return {};
  auto identity = combine_identity(c, contents.tensor_digests);
  if (!identity) return identity.error();
  contents.identity = std::move(*identity);
  return {};
}

Result<std::string> combine_identity(const ModelConfig& c, const std::vector<std::string>& digests) {
  if (digests.size() != tensor_count(c)) {
    return Error(ErrorCode::contract, "a model of this shape has " + std::to_string(tensor_count(c)) +
                                          " tensors, not " + std::to_string(digests.size()));
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
      return Error(ErrorCode::contract, "no digest of " + weight_name(weight_at(c, i)) + " was given");
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
