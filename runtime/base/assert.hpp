// ACCORD_ASSERT(condition, message): an invariant of accord's own code,
// checked in every build, Release included. On failure it prints the file,
// the line, the condition's text and the message to stderr and aborts, so
// the simulator, a test or a service stops at the fault's source rather
// than running on with a state it cannot trust.
//
// For our own code's invariants only, never for input: a malformed option,
// file or message from a peer is refused with an Error (and a message from
// the network counted as dropped), not asserted on (docs/protocol.md,
// "Invariants in code").
//
// Cheap on the path that holds: the condition is evaluated once, its
// failure is marked unlikely and calls out of line. `message` is a string
// literal (a const char*) that says what broke.
#pragma once

namespace accord {

// Prints "FILE:LINE: ACCORD_ASSERT(CONDITION) failed: MESSAGE" to stderr
// and calls std::abort().
[[noreturn, gnu::cold]] void assert_failed(const char* file, int line, const char* condition,
                                           const char* message) noexcept;

}  // namespace accord

#define ACCORD_ASSERT(condition, message)                               \
  do {                                                                  \
    if (!(condition)) [[unlikely]] {                                    \
      ::accord::assert_failed(__FILE__, __LINE__, #condition, message); \
    }                                                                   \
  } while (false)
