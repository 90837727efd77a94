#include "runtime/rank/snapshot_shelf.hpp"

#include <atomic>

namespace accord {

SnapshotShelf& SnapshotShelf::process() {
  static SnapshotShelf shelf;
  return shelf;
}

std::uint64_t SnapshotShelf::new_id() {
  static std::atomic<std::uint64_t> last{0};
  return ++last;
}

void SnapshotShelf::put(std::uint64_t id, RankId rank, std::shared_ptr<const RankSnapshot> snapshot) {
  std::lock_guard lock(mutex_);
  images_[{id, rank}] = std::move(snapshot);
}

std::shared_ptr<const RankSnapshot> SnapshotShelf::find(std::uint64_t id, RankId rank) const {
  std::lock_guard lock(mutex_);
  const auto found = images_.find({id, rank});
  return found == images_.end() ? nullptr : found->second;
}

void SnapshotShelf::drop(std::uint64_t id) {
  std::map<std::pair<std::uint64_t, RankId>, std::shared_ptr<const RankSnapshot>> dropped;
  {
    std::lock_guard lock(mutex_);
    auto first = images_.lower_bound({id, 0});
    auto last = images_.lower_bound({id + 1, 0});
    dropped.insert(std::make_move_iterator(first), std::make_move_iterator(last));
    images_.erase(first, last);
  }
  // The images' blocks go back to their pools here, outside the lock.
}

std::shared_ptr<const void> SnapshotShelf::hold(std::uint64_t id) {
  return std::shared_ptr<const void>(nullptr, [this, id](const void*) { drop(id); });
}

std::size_t SnapshotShelf::size() const {
  std::lock_guard lock(mutex_);
  return images_.size();
}

}  // namespace accord
