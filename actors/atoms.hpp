// The atoms of accord's actors (CAF 0.17.6 spelling). Included by actors/
// translation units and by tests that speak to the actors directly.
#pragma once

#include <caf/atom.hpp>

namespace accord {

using dropped_atom = caf::atom_constant<caf::atom("dropped")>;
using delayed_atom = caf::atom_constant<caf::atom("delayed")>;
using corrupt_atom = caf::atom_constant<caf::atom("corrupt")>;
using restart_atom = caf::atom_constant<caf::atom("restart")>;
using faults_atom = caf::atom_constant<caf::atom("faults")>;
using rank_state_atom = caf::atom_constant<caf::atom("rankstate")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using topology_atom = caf::atom_constant<caf::atom("topology")>;
using run_units_atom = caf::atom_constant<caf::atom("runUnits")>;
using observe_atom = caf::atom_constant<caf::atom("observe")>;
using apply_prediction_atom = caf::atom_constant<caf::atom("applyPred")>;
using begin_step_atom = caf::atom_constant<caf::atom("beginStep")>;
using checkpoint_atom = caf::atom_constant<caf::atom("checkpnt")>;
using rollback_atom = caf::atom_constant<caf::atom("rollback")>;
using reset_atom = caf::atom_constant<caf::atom("reset")>;
using commit_atom = caf::atom_constant<caf::atom("commit")>;
using restore_atom = caf::atom_constant<caf::atom("restore")>;
using forget_atom = caf::atom_constant<caf::atom("forget")>;
using accept_atom = caf::atom_constant<caf::atom("accept")>;
using check_prefix_atom = caf::atom_constant<caf::atom("chkPrefix")>;
using pack_shard_atom = caf::atom_constant<caf::atom("packShard")>;
using prepare_load_atom = caf::atom_constant<caf::atom("prepLoad")>;
using save_prepare_atom = caf::atom_constant<caf::atom("savePrep")>;
using publish_atom = caf::atom_constant<caf::atom("publish")>;
using load_preflight_atom = caf::atom_constant<caf::atom("loadPre")>;
using load_read_atom = caf::atom_constant<caf::atom("loadRead")>;
using assign_atom = caf::atom_constant<caf::atom("assign")>;
using name_atom = caf::atom_constant<caf::atom("name")>;
using down_atom = caf::atom_constant<caf::atom("down")>;

}  // namespace accord
