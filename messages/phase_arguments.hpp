// The arguments a PhaseBegin carries, encoded as little-endian bytes so
// every node reads them the same way. Decoding checks sizes and fails with
// std::nullopt on a malformed payload.
#pragma once

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

// StateCheckpoint of a forward step: the step's token ids, u32 each.
inline Bytes encode_tokens(std::span<const int> tokens) {
  Bytes out;
  out.reserve(tokens.size() * 4);
  for (int t : tokens) {
    const auto v = static_cast<std::uint32_t>(t);
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  return out;
}

inline std::optional<std::vector<int>> decode_tokens(std::span<const std::uint8_t> in) {
  if (in.size() % 4 != 0) return std::nullopt;
  std::vector<int> tokens;
  for (std::size_t i = 0; i < in.size(); i += 4) {
    std::uint32_t v = 0;
    for (std::size_t b = 0; b < 4; ++b) v |= static_cast<std::uint32_t>(in[i + b]) << (8 * b);
    tokens.push_back(static_cast<std::int32_t>(v));
  }
  return tokens;
}

// SessionRollbackPreparation: the checkpoint every rank must restore.
struct RollbackTarget {
  std::int32_t position = 0;
  std::uint64_t state_epoch = 0;
  std::uint64_t reset_count = 0;
};

inline Bytes encode_rollback(const RollbackTarget& target) {
  Bytes out;
  put_u64(out, static_cast<std::uint32_t>(target.position));
  put_u64(out, target.state_epoch);
  put_u64(out, target.reset_count);
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

}  // namespace accord
