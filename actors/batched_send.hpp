// Several messages for one receiver, ready at once, as one CAF message:
// the message itself when there is one, a batch (RankInstructions,
// RankReports; messages/protocol.hpp) when there are several.
#pragma once

#include <iterator>
#include <utility>
#include <variant>
#include <vector>

namespace accord {

// Sends `items` to `to` from `self` and empties `items`, which keeps its
// buffer for the next batch: a batch takes a vector of its own, sized to fit.
template <class Batch, class Self, class Receiver, class Item>
void send_batched(Self self, const Receiver& to, std::vector<Item>& items) {
  if (items.size() == 1) {
    std::visit([&](auto& message) { self->send(to, std::move(message)); }, items.front());
  } else if (!items.empty()) {
    self->send(to, Batch{{std::make_move_iterator(items.begin()), std::make_move_iterator(items.end())}});
  }
  items.clear();
}

}  // namespace accord
