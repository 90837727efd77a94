#include "runtime/base/assert.hpp"

#include <cstdio>
#include <cstdlib>

namespace accord {

void assert_failed(const char* file, int line, const char* condition, const char* message) noexcept {
  std::fprintf(stderr, "%s:%d: ACCORD_ASSERT(%s) failed: %s\n", file, line, condition, message);
  std::fflush(stderr);
  std::abort();
}

}  // namespace accord
