// The prompts `accord serve` computed before, kept as session snapshots
// (Session::snapshot) so that any request may start from the longest of
// them it begins with, on any single-rank slot (docs/serve.md, "Shared
// prefixes"). SGLang's RadixAttention keeps its prefixes so; here a
// snapshot shares the KV cache's blocks with the slot it was taken on, so
// keeping one costs no copy until the slot writes into a shared block.
//
// A trie keyed by whole blocks of KvCache::kBlockPositions tokens: a
// snapshot's entry hangs at the node of its whole blocks, and each node
// knows the entries that pass through it. A lookup walks the prompt's whole
// blocks down as far as they go and then compares, among the entries that
// pass through that node, the tokens past it one by one. Entries are
// evicted least recently used first under an entry and a byte bound; an
// evicted snapshot's handle is dropped (its blocks go back to their pool
// when no session shares them) and nodes no entry passes through are
// pruned.
//
// Thread-safe: the scheduler looks up and evicts while slots insert.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "runtime/serve/metrics.hpp"
#include "runtime/session/session.hpp"

namespace accord::serve {

struct PrefixStoreLimits {
  std::size_t entries = 64;  // 0: the store keeps nothing
  // The most bytes its entries may pin, each counted as its whole blocks
  // (as if no two shared one: an upper bound); 0: no bound.
  std::uint64_t bytes = std::uint64_t{1} << 30;
};

class PrefixStore {
 public:
  // `block_bytes`: what one block of positions costs in the KV pool.
  PrefixStore(PrefixStoreLimits limits, std::uint64_t block_bytes);
  ~PrefixStore();
  PrefixStore(const PrefixStore&) = delete;
  PrefixStore& operator=(const PrefixStore&) = delete;

  struct Match {
    SessionSnapshot snapshot;
    int length = 0;  // the tokens it shares with the prompt, at least a block
  };
  // The entry that shares the longest prefix with `prompt`, when one shares
  // at least one whole block; among equals the most recently used. The
  // entry becomes the most recently used.
  std::optional<Match> lookup(std::span<const int> prompt);
  // Keeps `snapshot`, the most recently used, when it holds at least one
  // whole block and fits the byte bound alone; an entry of the same tokens
  // is kept instead (and touched). Then evicts down to the limits.
  void insert(SessionSnapshot snapshot);
  // Evicts the least recently used entry; false when there is none.
  bool evict_oldest();
  // A slot restored a looked-up snapshot.
  void count_hit();

  bool enabled() const { return limits_.entries > 0; }
  PrefixStoreCounts counts() const;
  // The trie's nodes below its root: one per whole block some entry
  // passes through.
  std::size_t nodes() const;

 private:
  struct Node;
  struct Entry {
    SessionSnapshot snapshot;
    std::uint64_t bytes = 0;
  };
  using Entries = std::list<Entry>;  // most recently used first

  std::uint64_t bytes_of(const SessionSnapshot& snapshot) const;
  // The deepest node the prompt's whole blocks reach, and its depth.
  std::pair<Node*, int> walk(std::span<const int> prompt) const;
  static std::size_t nodes_below(const Node& node);
  // Under mutex_: unlinks the entry from the trie (pruning) and the list,
  // handing its snapshot to `released`.
  void remove(Entries::iterator entry, std::vector<SessionSnapshot>& released);
  void evict_to_limits(std::vector<SessionSnapshot>& released);

  const PrefixStoreLimits limits_;
  const std::uint64_t block_bytes_;
  mutable std::mutex mutex_;
  std::unique_ptr<Node> root_;  // guarded by mutex_, as are the fields below
  Entries entries_;
  std::uint64_t bytes_ = 0;
  std::uint64_t lookups_ = 0;
  std::uint64_t hits_ = 0;
  std::uint64_t evictions_ = 0;
};

}  // namespace accord::serve
