// What a session's callers say of a prompt cache and hear back from a save
// (docs/prompt-cache.md); the format itself is prompt_cache.hpp's.
#pragma once

#include <cstdint>
#include <string>

namespace accord {

// What a committed save reports: its transaction, the generation it
// published, and the bytes of its shards.
struct PromptCacheSaveResult {
  std::uint64_t epoch = 0;
  std::string generation;
  int prefix_token_count = 0;
  std::uint64_t shard_bytes = 0;
};

// Who a cache is for, chosen by the caller: a name for what the prefix is
// (say "system-prompt-v3") and a namespace that keeps applications apart.
struct PromptCacheDescriptor {
  std::string name;
  std::string cache_namespace;
  bool operator==(const PromptCacheDescriptor&) const = default;
};

}  // namespace accord
