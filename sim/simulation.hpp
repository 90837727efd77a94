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
  std::vector<std::string> trace;  // with `trace`: one line per operation
};

// `model` is tiny and synthetic (sim_main.cpp); `identity` is its identity.
SeedReport run_seed(std::uint64_t seed, const Model& model, const std::string& identity, bool trace = false);

}  // namespace accord::sim
