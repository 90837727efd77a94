// accord's errors: every call that can fail returns a Result<T> or a Status
// whose Error has an ErrorCode, a message, and for a transaction its epoch,
// its phase and whether it came before any state changed; a poisoned
// session's errors carry a Poison.
#pragma once

#include "runtime/base/error.hpp"
