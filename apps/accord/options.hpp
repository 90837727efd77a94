// Option checks shared by the subcommands, beyond what CLI11 checks itself.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "actors/node_address.hpp"
#include "runtime/base/error.hpp"
#include "runtime/model/stage_backend.hpp"

namespace accord::cli {

// A whole number from 0 to 2^64-1, for a std::uint64_t option. CLI11 alone
// reads "-1", 2^64 and anything larger as 2^64-1, so all of them would
// silently be one value.
CLI::Validator whole_number_range();

// A sampler's seed, as llama-server takes it: 0 to 2^64-1, or -1 for a
// seed drawn at random.
CLI::Validator sampler_seed_range();
// The seed a sampler_seed_range() text names; -1 draws one from
// std::random_device, which the caller reports so that the run can be
// repeated.
struct SamplerSeed {
  std::uint64_t value = 0;
  bool drawn = false;  // at random, for -1
};
SamplerSeed sampler_seed(const std::string& text);

// A float CLI11 reads, finite and >= 0 (a temperature).
CLI::Validator finite_at_least_zero();
// A float CLI11 reads, in (0, 1] (a top-p).
CLI::Validator above_zero_up_to_one();

// The threads a pool of this process gets for --threads: past
// cpu::max_useful_threads() they would only take turns on this machine's
// cores, so more are capped, with a warning.
int capped_threads(int requested);

// The parser of an option that lists nodes, "HOST:PORT,...": it fills
// `nodes`, or refuses `option`'s value.
std::function<void(const std::string&)> node_list(std::vector<NodeAddress>& nodes, const std::string& option);

// --ctx-size N: the positions a session holds (ModelLoad::context), the
// file's context length where smaller. The default, as llama.cpp's, keeps
// a Llama 3 file's 131072 from taking gigabytes of keys and values.
inline constexpr int kDefaultContext = 4096;
void add_context_option(CLI::App& cmd, int& context);
// --kv-type f32|f16|q8_0: the element type of every rank's keys and values.
void add_kv_type_option(CLI::App& cmd, KvType& type);
// --kv-budget-bytes N: the KV pool that `holders` (the command's sessions)
// take their keys and values from; 0: no budget.
void add_kv_budget_option(CLI::App& cmd, std::uint64_t& bytes, const std::string& holders);

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
