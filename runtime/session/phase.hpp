// The phases of a session transaction, named as in DESIGN.md's phase table.
// A single-rank session runs the local part of each; the distributed
// session agrees on every one of them across ranks.
#pragma once

#include <string_view>

namespace accord {

enum class Phase {
  StateCheckpoint,             // captured what the step may overwrite
  PromptCacheLoadPreflight,    // accepted the cache identity and input
  PromptCacheLoadPreparation,  // loaded and validated the shard into provisional state
  PromptCacheSavePreflight,    // accepted the save identity and input
  PromptCacheSavePreparation,  // wrote and validated an unpublished shard
  PromptCacheSavePublication,  // published the shard reversibly
  SessionCheckpoint,           // captured an opaque checkpoint for the caller
  SessionResetPreparation,     // prepared a replacement empty state
  SessionRollbackPreparation,  // validated a checkpoint to restore
  Execution,                   // the units ran
  OutputObservation,           // the final-logits observer ran
  OutputPublication,           // the (intervened) output is held for the caller
  MechanismCompletion,         // the device work is complete
  Commit,                      // provisional state became authoritative
};

std::string_view to_string(Phase phase);

}  // namespace accord
