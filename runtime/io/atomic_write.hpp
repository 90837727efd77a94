// Writing a file so that readers see the old file or the whole new one:
// the body writes to PATH.partial, which is renamed over PATH only when
// every byte was written.
#pragma once

#include <functional>
#include <ostream>
#include <string>

#include "runtime/error.hpp"

namespace accord {

// `body` writes the contents; a stream error or a failed rename is an io
// error and leaves PATH untouched (PATH.partial may remain).
Status write_atomically(const std::string& path, const std::function<void(std::ostream&)>& body);

}  // namespace accord
