#include "runtime/serve/prefix_store.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>

#include "runtime/base/assert.hpp"
#include "runtime/model/kv_cache.hpp"

namespace accord::serve {

namespace {

constexpr int kBlock = KvCache::kBlockPositions;

int whole_blocks(std::span<const int> tokens) { return static_cast<int>(tokens.size()) / kBlock; }

std::vector<int> block_key(std::span<const int> tokens, int block) {
  const auto first = tokens.begin() + static_cast<std::ptrdiff_t>(block) * kBlock;
  return std::vector<int>(first, first + kBlock);
}

// The tokens `a` and `b` share from `from` on, counted from the start.
int shared_from(std::span<const int> a, std::span<const int> b, int from) {
  const auto a_rest = a.subspan(std::min<std::size_t>(a.size(), static_cast<std::size_t>(from)));
  const auto b_rest = b.subspan(std::min<std::size_t>(b.size(), static_cast<std::size_t>(from)));
  const auto end = std::mismatch(a_rest.begin(), a_rest.end(), b_rest.begin(), b_rest.end()).first;
  return from + static_cast<int>(end - a_rest.begin());
}

}  // namespace

// A whole block's node: its children by their block's tokens, and the
// entries whose whole blocks pass through it or end at it.
struct PrefixStore::Node {
  std::map<std::vector<int>, std::unique_ptr<Node>> children;
  std::set<const Entry*> passing;
};

PrefixStore::PrefixStore(PrefixStoreLimits limits, std::uint64_t block_bytes)
    : limits_(limits), block_bytes_(block_bytes), root_(std::make_unique<Node>()) {}

PrefixStore::~PrefixStore() = default;

std::uint64_t PrefixStore::bytes_of(const SessionSnapshot& snapshot) const {
  const auto blocks = (static_cast<std::uint64_t>(snapshot.position()) + kBlock - 1) / kBlock;
  return blocks * block_bytes_;
}

std::pair<PrefixStore::Node*, int> PrefixStore::walk(std::span<const int> prompt) const {
  Node* node = root_.get();
  int depth = 0;
  for (; depth < whole_blocks(prompt); ++depth) {
    const auto child = node->children.find(block_key(prompt, depth));
    if (child == node->children.end()) break;
    node = child->second.get();
  }
  return {node, depth};
}

std::optional<PrefixStore::Match> PrefixStore::lookup(std::span<const int> prompt) {
  std::lock_guard lock(mutex_);
  ++lookups_;
  const auto [node, depth] = walk(prompt);
  if (depth == 0) return std::nullopt;
  ACCORD_ASSERT(!node->passing.empty(), "a node stays only while an entry passes through it");
  // Every entry through the node shares its `depth` blocks; the tokens
  // past them decide, and among equals the most recently used.
  auto best = entries_.end();
  int best_length = 0;
  for (auto entry = entries_.begin(); entry != entries_.end(); ++entry) {
    if (!node->passing.contains(&*entry)) continue;
    const int length = shared_from(entry->snapshot.tokens, prompt, depth * kBlock);
    if (length > best_length) {
      best = entry;
      best_length = length;
    }
  }
  entries_.splice(entries_.begin(), entries_, best);
  return Match{best->snapshot, best_length};
}

void PrefixStore::insert(SessionSnapshot snapshot) {
  std::vector<SessionSnapshot> released;  // dropped after the lock: their blocks go back to the pool
  std::lock_guard lock(mutex_);
  const std::span<const int> tokens(snapshot.tokens);
  if (!enabled() || whole_blocks(tokens) == 0) return;
  const auto [node, depth] = walk(tokens);
  if (depth == whole_blocks(tokens)) {
    const auto same = std::find_if(entries_.begin(), entries_.end(), [&, at = node](const Entry& entry) {
      return at->passing.contains(&entry) && entry.snapshot.tokens == snapshot.tokens;
    });
    if (same != entries_.end()) return entries_.splice(entries_.begin(), entries_, same);
  }
  const std::uint64_t bytes = bytes_of(snapshot);
  if (limits_.bytes > 0 && bytes > limits_.bytes) return;  // it would evict everything, itself too
  entries_.push_front(Entry{std::move(snapshot), bytes});
  const Entry* entry = &entries_.front();
  bytes_ += bytes;
  Node* at = root_.get();
  at->passing.insert(entry);
  for (int block = 0; block < whole_blocks(tokens); ++block) {
    auto& child = at->children[block_key(tokens, block)];
    if (!child) child = std::make_unique<Node>();
    at = child.get();
    at->passing.insert(entry);
  }
  evict_to_limits(released);
}

void PrefixStore::remove(Entries::iterator entry, std::vector<SessionSnapshot>& released) {
  const std::span<const int> tokens(entry->snapshot.tokens);
  Node* at = root_.get();
  at->passing.erase(&*entry);
  for (int block = 0; block < whole_blocks(tokens); ++block) {
    const auto child = at->children.find(block_key(tokens, block));
    child->second->passing.erase(&*entry);
    // Nobody passes through it, nor so through any node below it.
    if (child->second->passing.empty()) {
      at->children.erase(child);
      break;
    }
    at = child->second.get();
  }
  bytes_ -= entry->bytes;
  released.push_back(std::move(entry->snapshot));
  entries_.erase(entry);
  ++evictions_;
}

void PrefixStore::evict_to_limits(std::vector<SessionSnapshot>& released) {
  const auto over = [this] {
    return entries_.size() > limits_.entries || (limits_.bytes > 0 && bytes_ > limits_.bytes);
  };
  while (!entries_.empty() && over()) remove(std::prev(entries_.end()), released);
}

bool PrefixStore::evict_oldest() {
  std::vector<SessionSnapshot> released;
  std::lock_guard lock(mutex_);
  if (entries_.empty()) return false;
  remove(std::prev(entries_.end()), released);
  return true;
}

void PrefixStore::count_hit() {
  std::lock_guard lock(mutex_);
  ++hits_;
}

PrefixStoreCounts PrefixStore::counts() const {
  std::lock_guard lock(mutex_);
  return {lookups_, hits_, evictions_, entries_.size(), bytes_};
}

std::size_t PrefixStore::nodes_below(const Node& node) {
  std::size_t count = 0;
  for (const auto& [block, child] : node.children) count += 1 + nodes_below(*child);
  return count;
}

std::size_t PrefixStore::nodes() const {
  std::lock_guard lock(mutex_);
  return nodes_below(*root_);
}

}  // namespace accord::serve
