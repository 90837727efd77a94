// A std::optional on the wire: one byte that says whether a value follows,
// then the value. A deserializer makes the optional hold a
// default-constructed value and reads it in place.
#pragma once

#include <cstdint>
#include <optional>

namespace accord {

// Found by argument-dependent lookup for an optional of this namespace's
// types (through the template argument: std::optional<int> finds none).
template <class Inspector, class T>
typename Inspector::result_type inspect(Inspector& f, std::optional<T>& x) {
  if constexpr (Inspector::reads_state) {
    auto present = static_cast<std::uint8_t>(x.has_value());
    if (!x) return f(present);
    return f(present, *x);
  } else {
    std::uint8_t present = 0;
    if (auto failure = f(present)) return failure;
    if (present == 0) {
      x.reset();
      return f();
    }
    x.emplace();
    return f(*x);
  }
}

}  // namespace accord
