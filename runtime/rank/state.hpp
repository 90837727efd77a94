// The state of one rank's session: the KV cache of its units (wherever its
// stage backend keeps it), the committed position, the token held at every row, and bookkeeping that lets a
// checkpoint prove its rows were not overwritten since.
//
// Rows at and past the position are not state: nothing reads them. A step
// appends rows; before it does, capture_rows() saves exactly what it may
// overwrite, and restore() puts it back byte for byte and gives back the
// room the step took in the cache, so an aborted step leaves memory as it
// found it.
//
// Owned by a rank's RankStage; not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/model/kv_cache.hpp"

namespace accord {

class SessionState {
 public:
  // kv, the stage backend's, must outlive the state.
  explicit SessionState(KvStore& kv);

  KvStore& kv() { return kv_; }
  const KvStore& kv() const { return kv_; }
  int position() const { return position_; }
  int capacity() const { return kv_.capacity(); }
  // The epoch of the commit that produced the current contents.
  std::uint64_t state_epoch() const { return state_epoch_; }
  // Token ids at rows [0, position).
  std::span<const int> tokens() const { return {tokens_.data(), static_cast<std::size_t>(position_)}; }
  // The highest row ever written plus one.
  int high_water() const { return high_water_; }

  // What a step starting now may overwrite: rows [first, first + count).
  struct Undo {
    int position = 0;
    std::uint64_t state_epoch = 0;
    int high_water = 0;
    int first_row = 0;
    int row_count = 0;
    int reserved = 0;  // the cache's room then: rows past it are not captured, and their room is given back
    std::vector<float> keys, values;  // (units, captured rows, kv_dim)
    std::vector<int> tokens;
    std::vector<std::uint64_t> row_epochs;
  };
  Undo capture_rows(int first, int count) const;
  void restore(const Undo& undo);
  // Puts back the undo's rows from its `kept`-th on and leaves the first
  // `kept` as the step wrote them: a prediction-target step keeps the
  // rows it accepted and rolls the rest back before it commits.
  void restore_rows_after(const Undo& undo, int kept);

  // Records that rows [first, first + count) now hold `ids`, written by the
  // transaction `epoch`, and moves the position to first + count.
  void commit_rows(int first, std::span<const int> ids, std::uint64_t epoch);

  // Moves the position back to a checkpoint's; rows below it are kept.
  void rewind(int position, std::uint64_t state_epoch);
  // Empties the state (a reset committed at `state_epoch`): position 0, no
  // row written, the cache's room given back.
  void clear(std::uint64_t state_epoch);

  // Room in the cache for rows [0, end), rows [first, end) writable, or
  // why not (a spent KV pool): before a step or a load writes them.
  // Nothing observable changes; restore() gives back what it took.
  Status prepare_rows(int first, int end) { return kv_.prepare_write(first, end); }
  // Keeps the blocks prepare_rows() copied as the rows' own: restore() no
  // longer gives them back. Commits do so; so does a rank that opens a
  // transaction while an earlier one's decision never reached it (a
  // poison), which keeps what that one wrote, as a cache without shared
  // blocks would.
  void settle_rows() { kv_.settle_writes(); }

  // A stable copy of the state's content (snapshots): the cache's image of
  // its rows, which shares the cache's blocks, and its tokens.
  struct Image {
    std::shared_ptr<const KvImage> kv;
    std::vector<int> tokens;  // one per row: its position is their count
    int position() const { return static_cast<int>(tokens.size()); }
  };
  Image freeze() const;
  // Whether `image` fits this state's cache, or why not.
  Status check_image(const Image& image) const;
  // The state becomes the image's, as a commit at `state_epoch` that wrote
  // every row: checkpoints taken before are refused.
  void install(const Image& image, std::uint64_t state_epoch);

  // True when no row below `position` was written after `state_epoch`.
  bool rows_unchanged_since(int position, std::uint64_t state_epoch) const;

  // XXH3-128 over the KV rows below the position, the position, the state
  // epoch and the tokens: equal digests mean equal observable state.
  std::string digest() const;
  // The same without the state epoch: equal for a state and the images
  // taken of it, and for states restored from one image.
  std::string content_digest() const;
  static std::string content_digest(const Image& image);

  std::size_t used_bytes() const;

 private:
  KvStore& kv_;
  int position_ = 0;
  int high_water_ = 0;
  std::uint64_t state_epoch_ = 0;
  std::vector<int> tokens_;                // (capacity)
  std::vector<std::uint64_t> row_epochs_;  // (capacity) transaction that wrote each row
};

}  // namespace accord
