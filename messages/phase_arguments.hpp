// The arguments a PhaseBegin carries, encoded as little-endian bytes so
// every node reads them the same way. Decoding checks sizes and fails with
// std::nullopt on a malformed payload.
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace accord {

using Bytes = std::vector<std::uint8_t>;

inline void put_u64(Bytes& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

inline std::uint64_t get_u64(std::span<const std::uint8_t> in) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(in[static_cast<std::size_t>(i)]) << (8 * i);
  return v;
}

inline void put_u32(Bytes& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

inline std::uint32_t get_u32(std::span<const std::uint8_t> in) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(in[i]) << (8 * i);
  return v;
}

// StateCheckpoint of a forward step: the step's token ids, u32 each.
inline Bytes encode_tokens(std::span<const int> tokens) {
  Bytes out;
  out.reserve(tokens.size() * 4);
  for (int t : tokens) put_u32(out, static_cast<std::uint32_t>(t));
  return out;
}

inline std::optional<std::vector<int>> decode_tokens(std::span<const std::uint8_t> in) {
  if (in.size() % 4 != 0) return std::nullopt;
  std::vector<int> tokens;
  for (std::size_t i = 0; i < in.size(); i += 4) tokens.push_back(static_cast<std::int32_t>(get_u32(in.subspan(i, 4))));
  return tokens;
}

// PredictionTargetCapture and PredictionTargetStatePreparation: how many
// of the step's last tokens are a draft, as a u32.
inline Bytes encode_draft_tokens(int draft_tokens) {
  Bytes out;
  put_u32(out, static_cast<std::uint32_t>(draft_tokens));
  return out;
}

inline std::optional<int> decode_draft_tokens(std::span<const std::uint8_t> in) {
  if (in.size() != 4) return std::nullopt;
  return static_cast<std::int32_t>(get_u32(in));
}

// SessionRollbackPreparation: the checkpoint every rank must restore.
struct RollbackTarget {
  std::int32_t position = 0;
  std::uint64_t state_epoch = 0;
  std::uint64_t reset_epoch = 0;
};

inline Bytes encode_rollback(const RollbackTarget& target) {
  Bytes out;
  put_u64(out, static_cast<std::uint32_t>(target.position));
  put_u64(out, target.state_epoch);
  put_u64(out, target.reset_epoch);
  return out;
}

inline std::optional<RollbackTarget> decode_rollback(std::span<const std::uint8_t> in) {
  if (in.size() != 24) return std::nullopt;
  return RollbackTarget{static_cast<std::int32_t>(get_u64(in.first(8))), get_u64(in.subspan(8, 8)),
                        get_u64(in.subspan(16, 8))};
}

// The prompt-cache phases: what to save or load, and where. For a save,
// `save_id` names the new save on every rank; for PromptCacheLoadPreparation
// it is the save rank 0's live generation belongs to, which every rank's
// generation must belong to as well.
struct PromptCacheArguments {
  std::string root;
  std::string descriptor_name;
  std::string descriptor_namespace;
  std::string prepared_input;
  std::string save_id;
  std::vector<int> prefix;

  bool operator==(const PromptCacheArguments&) const = default;
};

inline void put_string(Bytes& out, const std::string& text) {
  put_u64(out, text.size());
  out.insert(out.end(), text.begin(), text.end());
}

// Reads length-prefixed fields in order; any read past the end fails.
class ArgumentReader {
 public:
  explicit ArgumentReader(std::span<const std::uint8_t> in) : in_(in) {}

  std::optional<std::span<const std::uint8_t>> sized_field() {
    if (in_.size() < 8) return std::nullopt;
    const std::uint64_t size = get_u64(in_.first(8));
    in_ = in_.subspan(8);
    if (size > in_.size()) return std::nullopt;
    const auto field = in_.first(static_cast<std::size_t>(size));
    in_ = in_.subspan(static_cast<std::size_t>(size));
    return field;
  }
  std::optional<std::string> string() {
    auto field = sized_field();
    if (!field) return std::nullopt;
    return std::string(field->begin(), field->end());
  }
  bool at_end() const { return in_.empty(); }

 private:
  std::span<const std::uint8_t> in_;
};

inline Bytes encode_prompt_cache(const PromptCacheArguments& a) {
  Bytes out;
  for (const std::string* text : {&a.root, &a.descriptor_name, &a.descriptor_namespace, &a.prepared_input, &a.save_id}) {
    put_string(out, *text);
  }
  const Bytes prefix = encode_tokens(a.prefix);
  put_u64(out, prefix.size());
  out.insert(out.end(), prefix.begin(), prefix.end());
  return out;
}

inline std::optional<PromptCacheArguments> decode_prompt_cache(std::span<const std::uint8_t> in) {
  ArgumentReader reader(in);
  PromptCacheArguments a;
  for (std::string* text : {&a.root, &a.descriptor_name, &a.descriptor_namespace, &a.prepared_input, &a.save_id}) {
    auto field = reader.string();
    if (!field) return std::nullopt;
    *text = std::move(*field);
  }
  auto prefix_bytes = reader.sized_field();
  if (!prefix_bytes || !reader.at_end()) return std::nullopt;
  auto prefix = decode_tokens(*prefix_bytes);
  if (!prefix) return std::nullopt;
  a.prefix = std::move(*prefix);
  return a;
}

// SamplingSynchronization: how the output owner samples. The sampler's
// random stream travels as its state, so the caller's sampler and the
// owner's draw the same numbers; stop_tokens end generation when sampled.
struct SamplingArguments {
  float temperature = 1.0f;
  float top_p = 0.9f;
  std::uint64_t rng_state = 0;
  std::vector<std::int32_t> stop_tokens;

  bool operator==(const SamplingArguments&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SamplingArguments& x) {
  return f(x.temperature, x.top_p, x.rng_state, x.stop_tokens);
}

inline Bytes encode_sampling(const SamplingArguments& arguments) {
  Bytes out;
  put_u32(out, std::bit_cast<std::uint32_t>(arguments.temperature));
  put_u32(out, std::bit_cast<std::uint32_t>(arguments.top_p));
  put_u64(out, arguments.rng_state);
  const Bytes stops = encode_tokens(arguments.stop_tokens);
  out.insert(out.end(), stops.begin(), stops.end());
  return out;
}

inline std::optional<SamplingArguments> decode_sampling(std::span<const std::uint8_t> in) {
  if (in.size() < 16) return std::nullopt;
  auto stops = decode_tokens(in.subspan(16));
  if (!stops) return std::nullopt;
  return SamplingArguments{std::bit_cast<float>(get_u32(in.first(4))), std::bit_cast<float>(get_u32(in.subspan(4, 4))),
                           get_u64(in.subspan(8, 8)), std::move(*stops)};
}

}  // namespace accord
