#include "runtime/rank/state.hpp"

#include <algorithm>

#include "runtime/base/assert.hpp"
#include "runtime/io/digest.hpp"

namespace accord {

namespace {

// How many of the undo's rows from its `kept`-th on lay in the cache's room
// when it was captured: only those were captured.
int captured_rows(const SessionState::Undo& undo, int kept) {
  return std::clamp(undo.reserved - (undo.first_row + kept), 0, undo.row_count - kept);
}

// Feeds the rows below `position` of units [first_unit, first_unit + units),
// shown by view(unit, first, count, see), to `d`.
template <class View>
void digest_rows(FastDigest& d, int first_unit, int units, int position, const View& view) {
  for (int u = first_unit; u < first_unit + units; ++u) {
    view(u, 0, position, [&](std::span<const float> keys, std::span<const float> values) {
      d.update(keys.data(), keys.size_bytes()).update(values.data(), values.size_bytes());
    });
  }
}

}  // namespace

SessionState::SessionState(KvStore& kv)
    : kv_(kv), tokens_(static_cast<std::size_t>(kv.capacity()), 0), row_epochs_(tokens_.size(), 0) {}

SessionState::Undo SessionState::capture_rows(int first, int count) const {
  ACCORD_ASSERT(first >= 0 && count >= 0 && first <= capacity() - count,
                "the rows a step may overwrite lie within the context");
  Undo undo;
  undo.position = position_;
  undo.state_epoch = state_epoch_;
  undo.high_water = high_water_;
  undo.first_row = first;
  undo.row_count = count;
  undo.reserved = kv_.reserved();
  const int captured = captured_rows(undo, 0);
  const auto row_floats = static_cast<std::size_t>(captured) * kv_.kv_dim();
  undo.keys.reserve(row_floats * kv_.unit_count());
  undo.values.reserve(row_floats * kv_.unit_count());
  for (int u = kv_.first_unit(); u < kv_.first_unit() + kv_.unit_count(); ++u) {
    kv_.view_rows(u, first, captured, [&](std::span<const float> keys, std::span<const float> values) {
      undo.keys.insert(undo.keys.end(), keys.begin(), keys.end());
      undo.values.insert(undo.values.end(), values.begin(), values.end());
    });
  }
  undo.tokens.assign(tokens_.begin() + first, tokens_.begin() + first + count);
  undo.row_epochs.assign(row_epochs_.begin() + first, row_epochs_.begin() + first + count);
  return undo;
}

void SessionState::restore(const Undo& undo) {
  kv_.undo_writes();  // blocks the step copied before writing give way to the shared ones
  restore_rows_after(undo, 0);
  position_ = undo.position;
  state_epoch_ = undo.state_epoch;
  high_water_ = undo.high_water;
}

void SessionState::restore_rows_after(const Undo& undo, int kept) {
  ACCORD_ASSERT(kept >= 0 && kept <= undo.row_count, "the rows kept of an undo are among the rows it captured");
  const int captured = captured_rows(undo, 0);
  const auto row_floats = static_cast<std::size_t>(captured) * kv_.kv_dim();
  const auto skipped = static_cast<std::size_t>(std::min(kept, captured)) * kv_.kv_dim();
  for (int i = 0; i < kv_.unit_count(); ++i) {
    const auto from = static_cast<std::size_t>(i) * row_floats + skipped;
    kv_.rewrite_rows(kv_.first_unit() + i, undo.first_row + std::min(kept, captured), captured_rows(undo, kept),
                     undo.keys.data() + from, undo.values.data() + from);
  }
  // Rows past the room there was held nothing: their room goes back.
  kv_.shrink_to(std::max(undo.reserved, undo.first_row + kept));
  std::copy(undo.tokens.begin() + kept, undo.tokens.end(), tokens_.begin() + undo.first_row + kept);
  std::copy(undo.row_epochs.begin() + kept, undo.row_epochs.end(), row_epochs_.begin() + undo.first_row + kept);
}

void SessionState::commit_rows(int first, std::span<const int> ids, std::uint64_t epoch) {
  ACCORD_ASSERT(first >= 0 && first <= position_ && ids.size() <= static_cast<std::size_t>(capacity() - first),
                "committed rows continue the state within the context: positions never exceed it");
  ACCORD_ASSERT(epoch > state_epoch_, "epochs never go backwards: a commit's epoch follows the state's");
  kv_.settle_writes();
  std::copy(ids.begin(), ids.end(), tokens_.begin() + first);
  std::fill_n(row_epochs_.begin() + first, ids.size(), epoch);
  position_ = first + static_cast<int>(ids.size());
  high_water_ = std::max(high_water_, position_);
  state_epoch_ = epoch;
}

void SessionState::rewind(int position, std::uint64_t state_epoch) {
  ACCORD_ASSERT(position >= 0 && position <= high_water_,
                "a rewind goes to a position whose rows were written: a checkpoint's or the start");
  position_ = position;
  state_epoch_ = state_epoch;
}

void SessionState::clear(std::uint64_t state_epoch) {
  rewind(0, state_epoch);
  high_water_ = 0;
  kv_.settle_writes();
  kv_.shrink_to(0);
}

SessionState::Image SessionState::freeze() const {
  return {kv_.freeze(position_), std::vector<int>(tokens_.begin(), tokens_.begin() + position_)};
}

Status SessionState::check_image(const Image& image) const {
  if (image.kv == nullptr || image.kv->positions() != image.position()) {
    return Error(ErrorCode::state, "the snapshot's rows and tokens disagree");
  }
  return kv_.check_image(*image.kv);
}

void SessionState::install(const Image& image, std::uint64_t state_epoch) {
  ACCORD_ASSERT(state_epoch > state_epoch_, "epochs never go backwards: an install commits after the state");
  kv_.thaw(*image.kv);
  std::copy(image.tokens.begin(), image.tokens.end(), tokens_.begin());
  std::fill_n(row_epochs_.begin(), image.tokens.size(), state_epoch);
  position_ = image.position();
  high_water_ = position_;
  state_epoch_ = state_epoch;
}

bool SessionState::rows_unchanged_since(int position, std::uint64_t state_epoch) const {
  if (position > high_water_) return false;
  return std::all_of(row_epochs_.begin(), row_epochs_.begin() + position,
                     [&](std::uint64_t e) { return e <= state_epoch; });
}

std::string SessionState::digest() const {
  FastDigest d;
  digest_rows(d, kv_.first_unit(), kv_.unit_count(), position_,
              [&](int u, int first, int count, const KvStore::RowsView& see) { kv_.view_rows(u, first, count, see); });
  d.update_value(position_).update_value(state_epoch_);
  d.update(tokens_.data(), static_cast<std::size_t>(position_) * sizeof(int));
  return d.hex();
}

std::string SessionState::content_digest() const { return content_digest(freeze()); }

std::string SessionState::content_digest(const Image& image) {
  FastDigest d;
  const KvImage& kv = *image.kv;
  digest_rows(d, kv.first_unit(), kv.unit_count(), image.position(),
              [&](int u, int first, int count, const KvImage::RowsView& see) { kv.view_rows(u, first, count, see); });
  d.update_value(image.position());
  d.update(image.tokens.data(), image.tokens.size() * sizeof(int));
  return d.hex();
}

std::size_t SessionState::used_bytes() const { return static_cast<std::size_t>(position_) * kv_.position_bytes(); }

}  // namespace accord
