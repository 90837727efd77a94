// One seeded run of the simulator (docs/simulation.md): the seed draws a
// cluster (ranks, fault plans, network weather) and a workload of session
// operations; each runs on the cluster and, where it commits, on a
// one-rank reference engine, and the invariants are checked after every
// decision. The same seed gives the same run, event for event.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model/model.hpp"

namespace accord::sim {

struct SeedReport {
  std::uint64_t seed = 0;
  std::vector<std::string> violations;  // empty: every invariant held
  int operations = 0;
  int committed = 0;
  int aborted = 0;  // and refused
  int poisoned = 0;
  std::uint64_t crashes = 0;
  std::uint64_t cuts = 0;
  std::uint64_t power_losses = 0;
  // Transactions run over expert routes (a routed model, its experts over
  // two ranks or more), those of them that committed, aborted and
  // poisoned, and the expert rows handed to a rank.
  int routed_steps = 0;
  int routed_committed = 0;
  int routed_aborted = 0;
  int routed_poisoned = 0;
  std::uint64_t expert_transfers = 0;
  std::vector<std::string> trace;  // with `trace`: one line per operation
};

// A model the seeds draw, and its identity.
struct SimModel {
  const Model& model;
  std::string identity;
};

// The models are tiny and synthetic (sim/main.cpp), of the same units: each
// seed draws `dense` or `routed` (a mixture of experts), and for the
// routed one over how many ranks its experts spread.
SeedReport run_seed(std::uint64_t seed, const SimModel& dense, const SimModel& routed, bool trace = false);

}  // namespace accord::sim
