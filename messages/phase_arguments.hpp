// The arguments a PhaseBegin carries, encoded as little-endian bytes so
// every node reads them the same way. Decoding checks sizes and fails with
// std::nullopt on a malformed payload.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
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

}  // namespace accord
