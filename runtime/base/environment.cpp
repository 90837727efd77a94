#include "runtime/base/environment.hpp"

#include <cstdlib>

namespace accord {

namespace {

std::string variable(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

}  // namespace

Result<Environment> read_environment() {
  Environment environment;
  auto faults = parse_fault_list(variable("ACCORD_FAULTS"));
  if (!faults) return Error(ErrorCode::contract, "ACCORD_FAULTS: " + faults.error().message());
  environment.faults = std::move(*faults);
  environment.secret_file = variable("ACCORD_SECRET_FILE");
  return environment;
}

}  // namespace accord
