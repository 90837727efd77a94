#include "runtime/session/phase.hpp"

namespace accord {

std::string_view to_string(Phase phase) {
  switch (phase) {
    case Phase::StateCheckpoint: return "StateCheckpoint";
    case Phase::PromptCacheLoadPreflight: return "PromptCacheLoadPreflight";
    case Phase::PromptCacheLoadPreparation: return "PromptCacheLoadPreparation";
    case Phase::PromptCacheSavePreflight: return "PromptCacheSavePreflight";
    case Phase::PromptCacheSavePreparation: return "PromptCacheSavePreparation";
    case Phase::PromptCacheSavePublication: return "PromptCacheSavePublication";
    case Phase::SessionCheckpoint: return "SessionCheckpoint";
    case Phase::SessionResetPreparation: return "SessionResetPreparation";
    case Phase::SessionRollbackPreparation: return "SessionRollbackPreparation";
    case Phase::Execution: return "Execution";
    case Phase::OutputObservation: return "OutputObservation";
    case Phase::OutputPublication: return "OutputPublication";
    case Phase::MechanismCompletion: return "MechanismCompletion";
    case Phase::Commit: return "Commit";
  }
  return "Unknown";
}

}  // namespace accord
