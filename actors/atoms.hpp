// The atoms of accord's actors (CAF 0.17.6 spelling). Included by actors/
// translation units and by tests that speak to the actors directly.
#pragma once

#include <caf/atom.hpp>

namespace accord {

using dropped_atom = caf::atom_constant<caf::atom("dropped")>;
using delayed_atom = caf::atom_constant<caf::atom("delayed")>;
using restart_atom = caf::atom_constant<caf::atom("restart")>;
using faults_atom = caf::atom_constant<caf::atom("faults")>;
using rank_state_atom = caf::atom_constant<caf::atom("rankstate")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using assign_atom = caf::atom_constant<caf::atom("assign")>;
using shard_atom = caf::atom_constant<caf::atom("shard")>;
using name_atom = caf::atom_constant<caf::atom("name")>;
using down_atom = caf::atom_constant<caf::atom("down")>;
using deadline_atom = caf::atom_constant<caf::atom("deadline")>;
using release_atom = caf::atom_constant<caf::atom("release")>;

}  // namespace accord
