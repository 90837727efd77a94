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
  }
  return "unknown";
}

}  // namespace accord
