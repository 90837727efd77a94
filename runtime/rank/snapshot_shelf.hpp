// Where a process's ranks keep their snapshots (docs/session.md,
// "Snapshots and forks"): one stable image of one rank's state per
// snapshot id and rank, with the identity a restore checks.
//
// A snapshot transaction puts every rank's image here at its commit; a
// restore on any session whose ranks have the same model, units and kind of
// cache reads it back (a fork is a restore on a new session). The caller's
// handle drops the snapshot when the last copy of it goes
// (SnapshotShelf::hold). The images share the caches' blocks, so a
// snapshot costs no copy and stays as it was while its sessions advance.
//
// Thread-safe: the ranks of every session in the process use one shelf.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "messages/phase.hpp"
#include "runtime/rank/prompt_cache_shard.hpp"
#include "runtime/rank/state.hpp"

namespace accord {

struct RankSnapshot {
  SessionState::Image image;
  ShardIdentity identity;  // of the rank that took it: model, topology, width
};

class SnapshotShelf {
 public:
  // The process's shelf.
  static SnapshotShelf& process();
  // An id no snapshot of this process had.
  static std::uint64_t new_id();

  void put(std::uint64_t id, RankId rank, std::shared_ptr<const RankSnapshot> snapshot);
  // Rank `rank`'s image of snapshot `id`; nullptr when there is none.
  std::shared_ptr<const RankSnapshot> find(std::uint64_t id, RankId rank) const;
  // Drops every rank's image of snapshot `id`.
  void drop(std::uint64_t id);
  // A token that drops snapshot `id` when its last copy goes.
  std::shared_ptr<const void> hold(std::uint64_t id);
  // How many ranks' images are shelved.
  std::size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::uint64_t, RankId>, std::shared_ptr<const RankSnapshot>> images_;
};

}  // namespace accord
