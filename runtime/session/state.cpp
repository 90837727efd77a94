#include "runtime/session/state.hpp"

#include <algorithm>

#include "runtime/io/digest.hpp"

namespace accord {

SessionState::SessionState(const ModelConfig& config, int first_unit, int unit_count)
    : kv_(config, first_unit, unit_count),
      tokens_(static_cast<std::size_t>(config.seq_len), 0),
      row_epochs_(static_cast<std::size_t>(config.seq_len), 0) {}

SessionState::Undo SessionState::capture_rows(int first, int count) const {
  Undo undo;
  undo.position = position_;
  undo.state_epoch = state_epoch_;
  undo.high_water = high_water_;
  undo.first_row = first;
  undo.row_count = count;
  const auto row_floats = static_cast<std::size_t>(count) * kv_.kv_dim();
  const auto offset = static_cast<std::size_t>(first) * kv_.kv_dim();
  undo.keys.reserve(row_floats * kv_.unit_count());
  undo.values.reserve(row_floats * kv_.unit_count());
  for (int u = kv_.first_unit(); u < kv_.first_unit() + kv_.unit_count(); ++u) {
    undo.keys.insert(undo.keys.end(), kv_.keys(u) + offset, kv_.keys(u) + offset + row_floats);
    undo.values.insert(undo.values.end(), kv_.values(u) + offset, kv_.values(u) + offset + row_floats);
  }
  undo.tokens.assign(tokens_.begin() + first, tokens_.begin() + first + count);
  undo.row_epochs.assign(row_epochs_.begin() + first, row_epochs_.begin() + first + count);
  return undo;
}

void SessionState::restore(const Undo& undo) {
  restore_rows_after(undo, 0);
  position_ = undo.position;
  state_epoch_ = undo.state_epoch;
  high_water_ = undo.high_water;
}

void SessionState::restore_rows_after(const Undo& undo, int kept) {
  const auto kv_dim = static_cast<std::size_t>(kv_.kv_dim());
  const auto row_floats = static_cast<std::size_t>(undo.row_count) * kv_dim;
  const auto skipped = static_cast<std::size_t>(kept) * kv_dim;
  const auto offset = static_cast<std::size_t>(undo.first_row) * kv_dim + skipped;
  for (int i = 0; i < kv_.unit_count(); ++i) {
    const int u = kv_.first_unit() + i;
    const auto from = static_cast<std::ptrdiff_t>(static_cast<std::size_t>(i) * row_floats + skipped);
    std::copy_n(undo.keys.begin() + from, row_floats - skipped, kv_.keys(u) + offset);
    std::copy_n(undo.values.begin() + from, row_floats - skipped, kv_.values(u) + offset);
  }
  std::copy(undo.tokens.begin() + kept, undo.tokens.end(), tokens_.begin() + undo.first_row + kept);
  std::copy(undo.row_epochs.begin() + kept, undo.row_epochs.end(), row_epochs_.begin() + undo.first_row + kept);
}

void SessionState::commit_rows(int first, std::span<const int> ids, std::uint64_t epoch) {
  std::copy(ids.begin(), ids.end(), tokens_.begin() + first);
  std::fill_n(row_epochs_.begin() + first, ids.size(), epoch);
  position_ = first + static_cast<int>(ids.size());
  high_water_ = std::max(high_water_, position_);
  state_epoch_ = epoch;
}

void SessionState::rewind(int position, std::uint64_t state_epoch) {
  position_ = position;
  state_epoch_ = state_epoch;
}

bool SessionState::rows_unchanged_since(int position, std::uint64_t state_epoch) const {
  if (position > high_water_) return false;
  return std::all_of(row_epochs_.begin(), row_epochs_.begin() + position,
                     [&](std::uint64_t e) { return e <= state_epoch; });
}

std::string SessionState::digest() const {
  FastDigest d;
  const auto floats = static_cast<std::size_t>(position_) * kv_.kv_dim();
  for (int u = kv_.first_unit(); u < kv_.first_unit() + kv_.unit_count(); ++u) {
    d.update(kv_.keys(u), floats * sizeof(float)).update(kv_.values(u), floats * sizeof(float));
  }
  d.update_value(position_).update_value(state_epoch_);
  d.update(tokens_.data(), static_cast<std::size_t>(position_) * sizeof(int));
  return d.hex();
}

std::size_t SessionState::used_bytes() const {
  return static_cast<std::size_t>(position_) * kv_.kv_dim() * kv_.unit_count() * 2 * sizeof(float);
}

}  // namespace accord
