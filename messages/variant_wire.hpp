// A std::variant of message types on the wire: the alternative's index (one
// byte), then the alternative. An inspector that writes the value (a
// deserializer) reads the index, makes the variant hold that alternative,
// default-constructed, and reads it in place. An index that names no
// alternative (a sender that knows more kinds) reads the first one in its
// place: for PhaseArguments that is NoArguments, which reads nothing and
// which every phase that takes arguments refuses as malformed; for a
// message, the bytes that follow are another kind's, and decoding fails or
// yields a message the receiver checks like any other (session, epoch,
// rank).
#pragma once

#include <cstddef>
#include <cstdint>
#include <variant>

namespace accord {

namespace detail {

template <std::size_t I = 0, class... Ts>
void emplace_alternative(std::variant<Ts...>& x, std::size_t index) {
  if constexpr (I < sizeof...(Ts)) {
    if (index == I) {
      x.template emplace<I>();
    } else {
      emplace_alternative<I + 1>(x, index);
    }
  } else {
    x.template emplace<0>();
  }
}

}  // namespace detail

// Found by argument-dependent lookup for a variant of this namespace's types.
template <class Inspector, class... Ts>
typename Inspector::result_type inspect(Inspector& f, std::variant<Ts...>& x) {
  static_assert(sizeof...(Ts) <= 256, "the index travels as one byte");
  if constexpr (Inspector::reads_state) {
    auto index = static_cast<std::uint8_t>(x.index());
    return std::visit([&](auto& alternative) { return f(index, alternative); }, x);
  } else {
    std::uint8_t index = 0;
    if (auto failure = f(index)) return failure;
    detail::emplace_alternative(x, index);
    return std::visit([&](auto& alternative) { return f(alternative); }, x);
  }
}

}  // namespace accord
