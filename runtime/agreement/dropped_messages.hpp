// Why an agreement state machine ignored an input, and how often: the
// reasons and their counter live in messages/dropped_messages.hpp, free of
// the agreement, so a session's public header can report them; this adds
// the reasons' names.
#pragma once

#include <string_view>

#include "messages/dropped_messages.hpp"

namespace accord {

std::string_view to_string(DropReason reason);

}  // namespace accord
