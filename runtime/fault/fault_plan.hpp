// Fault plans (docs/faults.md): which rank fails, in which
// phase, how, and at which occurrence. The same plan comes from the C++ API,
// from `accord generate --fault RANK:PHASE:KIND[:AT]` and from the
// ACCORD_FAULTS environment variable (entries separated by ';'), so a
// service that embeds accord runs the scenarios our tests run.
//
//   2:OutputPublication:error            rank 2 reports a failed status
//   1:SamplingSynchronization:error:2    ... the second time it runs it
//   0:BoundarySourceReady(0->1):drop     rank 0's status on that route is lost
//
// This file parses and counts; the transports carry faults out (the direct
// engine, runtime/engine/direct_engine.hpp, and the rank actors, actors/).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "messages/fault.hpp"
#include "messages/phase.hpp"
#include "runtime/base/error.hpp"
#include "runtime/io/env.hpp"

namespace accord {

std::string_view to_string(FaultKind kind);

// "1:BoundarySourceReady(0->1):drop:1": the syntax parse_fault reads.
std::string to_string(const Fault& fault);

// Fails with ErrorCode::contract and a message naming what is wrong.
Result<Fault> parse_fault(std::string_view text);
// Entries separated by ';'; empty entries are ignored.
Result<std::vector<Fault>> parse_fault_list(std::string_view text);

// Checks a plan against a session of `ranks` ranks, each routed block's
// experts spread over `expert_ranks` of them: each rank and route exists,
// and each kind is one of FaultKind's (a plan may come off the wire).
Status check_fault_plan(const std::vector<Fault>& plan, int ranks, int expert_ranks = 1);

// The `corrupt` fault's damage: inverts the bits of the byte in the middle
// of `file`, in place (not synced: a failing disk does not say so).
Status flip_middle_byte(Env& env, const std::filesystem::path& file);

// One rank's share of a plan, with its own counters: each rank's actors
// hold their own, so counting needs no lock.
class RankFaults {
 public:
  RankFaults() = default;
  RankFaults(RankId rank, const std::vector<Fault>& plan);

  // Called once each time the rank runs `phase`: the fault that fires now,
  // if any. Every matching entry counts the occurrence.
  std::optional<FaultKind> on_phase(const PhaseId& phase);

 private:
  struct Entry {
    Fault fault;
    std::uint32_t seen = 0;
  };
  std::vector<Entry> entries_;
};

}  // namespace accord
