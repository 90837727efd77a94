// The atoms of accord's actors (CAF 0.17.6 spelling). Included by actors/
// translation units only.
#pragma once

#include <caf/atom.hpp>

namespace accord {

using tick_atom = caf::atom_constant<caf::atom("tick")>;
using topology_atom = caf::atom_constant<caf::atom("topology")>;
using run_units_atom = caf::atom_constant<caf::atom("runUnits")>;
using observe_atom = caf::atom_constant<caf::atom("observe")>;
using output_atom = caf::atom_constant<caf::atom("output")>;
using sample_atom = caf::atom_constant<caf::atom("sample")>;
using capture_atom = caf::atom_constant<caf::atom("capture")>;
using captured_atom = caf::atom_constant<caf::atom("captured")>;
using begin_step_atom = caf::atom_constant<caf::atom("beginStep")>;
using checkpoint_atom = caf::atom_constant<caf::atom("checkpnt")>;
using rollback_atom = caf::atom_constant<caf::atom("rollback")>;
using reset_atom = caf::atom_constant<caf::atom("reset")>;
using commit_atom = caf::atom_constant<caf::atom("commit")>;
using restore_atom = caf::atom_constant<caf::atom("restore")>;
using forget_atom = caf::atom_constant<caf::atom("forget")>;
using accept_atom = caf::atom_constant<caf::atom("accept")>;
using outgoing_atom = caf::atom_constant<caf::atom("outgoing")>;

}  // namespace accord
