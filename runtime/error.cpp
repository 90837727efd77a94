#include "runtime/error.hpp"

namespace accord {

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::contract:
      return "contract";
    case ErrorCode::io:
      return "io";
    case ErrorCode::format:
      return "format";
    case ErrorCode::architecture:
      return "architecture";
    case ErrorCode::state:
      return "state";
    case ErrorCode::prompt_cache:
      return "prompt_cache";
    case ErrorCode::mechanism:
      return "mechanism";
    case ErrorCode::commit_aborted:
      return "commit_aborted";
    case ErrorCode::commit_indeterminate:
      return "commit_indeterminate";
  }
  return "unknown";
}

}  // namespace accord
