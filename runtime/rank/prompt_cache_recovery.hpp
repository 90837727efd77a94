// Heals a prompt cache whose ranks were left on different generations: a
// save killed between its ranks' publications, a rank folder removed, a
// CURRENT naming a generation that is gone (docs/prompt-cache.md,
// "Recovery"). It needs every rank folder of the cache under one root, as
// `accord generate` has with in-process ranks; a cache whose ranks live on
// other machines is recovered by nobody here. CAF-free.
//
// The rule, under every rank folder's writer lock:
// - rank 0's CURRENT names generation G, and every rank G was saved with
//   names G too and holds it: the cache is consistent, nothing is done.
//   (A generation that is damaged rather than mixed is left to the load,
//   which refuses it.)
// - otherwise the live generation becomes one that every rank of its save
//   holds whole (manifest valid, shard checksum good), published or still
//   staged, and that was published on at least one rank: rank 0's if it
//   qualifies, else the one most ranks name, else the greatest name. Ranks
//   that only staged it publish it (roll forward); ranks on another
//   generation point back to it (roll back).
// - when no generation qualifies, every CURRENT is removed: the cache is
//   empty and the next save starts afresh.
#pragma once

#include <filesystem>
#include <string>

#include "runtime/base/error.hpp"
#include "runtime/io/env.hpp"

namespace accord {

enum class RecoveryAction {
  none,     // consistent (or empty): nothing was touched
  busy,     // a writer holds a rank's lock; it will finish or die first
  healed,   // every rank now names `live`
  cleared,  // no generation was whole on every rank: CURRENT removed everywhere
};

struct PromptCacheRecovery {
  RecoveryAction action = RecoveryAction::none;
  std::string live;    // the live generation after a heal
  std::string reason;  // what was found, for a person
};

Result<PromptCacheRecovery> recover_prompt_cache(const std::filesystem::path& root, Env& env = posix_env());

}  // namespace accord
