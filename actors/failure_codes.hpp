// The runtime's ErrorCode and its wire form FailureCode (messages/ cannot
// depend on runtime/), both ways. Codes a rank never reports travel as
// mechanism.
#pragma once

#include "messages/protocol.hpp"
#include "runtime/error.hpp"

namespace accord {

inline FailureCode to_failure_code(ErrorCode code) {
  switch (code) {
    case ErrorCode::contract: return FailureCode::contract;
    case ErrorCode::io: return FailureCode::io;
    case ErrorCode::format: return FailureCode::format;
    case ErrorCode::architecture: return FailureCode::architecture;
    case ErrorCode::state: return FailureCode::state;
    case ErrorCode::prompt_cache: return FailureCode::prompt_cache;
    default: return FailureCode::mechanism;
  }
}

inline ErrorCode to_error_code(FailureCode code) {
  switch (code) {
    case FailureCode::contract: return ErrorCode::contract;
    case FailureCode::io: return ErrorCode::io;
    case FailureCode::format: return ErrorCode::format;
    case FailureCode::architecture: return ErrorCode::architecture;
    case FailureCode::state: return ErrorCode::state;
    case FailureCode::prompt_cache: return ErrorCode::prompt_cache;
    case FailureCode::mechanism: return ErrorCode::mechanism;
  }
  return ErrorCode::mechanism;
}

}  // namespace accord
