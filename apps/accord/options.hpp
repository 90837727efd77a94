// Option checks shared by the subcommands, beyond what CLI11 checks itself.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/model/stage_backend.hpp"

namespace accord::cli {

// A seed: a whole number from 0 to 2^64-1. CLI11 alone reads "-1", 2^64 and
// anything larger as 2^64-1, so all of them would silently be one seed.
CLI::Validator seed_range();

// The threads a pool of this process gets for --threads: past
// cpu::max_useful_threads() they would only take turns on this machine's
// cores, so more are capped, with a warning.
int capped_threads(int requested);

// --backend cpu|cuda and --devices 0,1,...: where the command's ranks compute.
struct BackendArgs {
  std::string backend = "cpu";
  std::vector<int> devices;

  BackendChoice choice() const;
};
void add_backend_options(CLI::App& cmd, BackendArgs& args);
// The choice, once this build and machine are known to run it
// (check_backend: no CUDA compiled in, no device, a device that is not there).
Result<BackendChoice> checked_backend(const BackendArgs& args);

}  // namespace accord::cli
