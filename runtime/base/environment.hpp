// The environment variables that accord's commands read. The library reads
// none of them itself: a service that embeds accord and wants their
// behaviour calls read_environment() and passes what it finds on as
// options (DistributedOptions::faults and ::secret_file). ACCORD_CPU_PATH
// is the command line's own (kernels/cpu/isa.hpp, cpu::use_isa).
#pragma once

#include <string>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/fault/fault_plan.hpp"

namespace accord {

struct Environment {
  // ACCORD_FAULTS: fault entries separated by ';' (docs/faults.md), to add
  // to those of the command line.
  std::vector<Fault> faults;
  // ACCORD_SECRET_FILE: the file of a cluster's secret, for a command
  // given no --secret-file (docs/protocol.md, "Node security").
  std::string secret_file;

  // The secret file a command uses: its --secret-file, else ACCORD_SECRET_FILE.
  const std::string& secret_file_for(const std::string& option) const { return option.empty() ? secret_file : option; }
};

// Reads the variables; an unset one leaves its field empty. Fails naming
// the variable when ACCORD_FAULTS does not parse.
Result<Environment> read_environment();

}  // namespace accord
