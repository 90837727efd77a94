// accord-sim: the whole cluster in one thread, on a simulated network and
// clock, one seed per run (docs/simulation.md).
//
//   accord-sim --seeds 10000 --from 1   runs seeds 1..10000
//   accord-sim --seed 42                replays seed 42 and prints its trace
//
// The last line states the seeds run and the violations found; the exit
// code is 1 on any violation, 2 on a usage error.
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include <CLI/CLI.hpp>

#include "runtime/model/identity.hpp"
#include "runtime/model/synthetic.hpp"
#include "sim/simulation.hpp"

namespace {

// A model small enough that a step costs microseconds, with grouped-query
// attention and four units (so up to four ranks).
accord::Result<accord::Model> tiny_model() {
  accord::SyntheticModelOptions options;
  options.config.dim = 16;
  options.config.hidden_dim = 24;
  options.config.n_layers = 4;
  options.config.n_heads = 4;
  options.config.n_kv_heads = 2;
  options.config.vocab_size = 32;
  options.config.seq_len = 48;
  options.seed = 17;
  const auto path = std::filesystem::temp_directory_path() / ("accord-sim-" + std::to_string(::getpid()) + ".bin");
  accord::Status written = accord::write_synthetic_model(path.string(), options);
  auto model = written ? accord::Model::load(path.string()) : accord::Result<accord::Model>(written.error());
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
  return model;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"accord-sim: seeded simulation of a whole accord cluster in one thread"};
  std::uint64_t seeds = 1000;
  std::uint64_t from = 1;
  std::optional<std::uint64_t> replay;
  app.add_option("--seeds", seeds, "how many seeds to run")->check(CLI::PositiveNumber);
  app.add_option("--from", from, "the first seed");
  app.add_option("--seed", replay, "replay one seed and print its trace");
  CLI11_PARSE(app, argc, argv);

  auto model = tiny_model();
  if (!model) {
    std::fprintf(stderr, "accord-sim: %s\n", model.error().message().c_str());
    return 1;
  }
  const std::string identity = accord::model_identity(*model);
  if (replay) {
    from = *replay;
    seeds = 1;
  }
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t violations = 0;
  std::uint64_t operations = 0;
  std::uint64_t committed = 0;
  std::uint64_t crashes = 0;
  std::uint64_t power_losses = 0;
  for (std::uint64_t seed = from; seed < from + seeds; ++seed) {
    const accord::sim::SeedReport report = accord::sim::run_seed(seed, *model, identity, replay.has_value());
    for (const auto& line : report.trace) std::printf("  %s\n", line.c_str());
    for (const auto& v : report.violations) {
      std::printf("seed %llu: VIOLATION at %s\n  replay: accord-sim --seed %llu\n",
                  static_cast<unsigned long long>(seed), v.c_str(), static_cast<unsigned long long>(seed));
    }
    violations += report.violations.size();
    operations += static_cast<std::uint64_t>(report.operations);
    committed += static_cast<std::uint64_t>(report.committed);
    crashes += report.crashes + report.cuts;
    power_losses += report.power_losses;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "accord-sim: %llu seeds (%llu..%llu), %llu operations (%llu committed), %llu ranks lost, "
      "%llu power losses, %.1f s: %llu violations\n",
      static_cast<unsigned long long>(seeds), static_cast<unsigned long long>(from),
      static_cast<unsigned long long>(from + seeds - 1), static_cast<unsigned long long>(operations),
      static_cast<unsigned long long>(committed), static_cast<unsigned long long>(crashes),
      static_cast<unsigned long long>(power_losses), seconds, static_cast<unsigned long long>(violations));
  return violations == 0 ? 0 : 1;
}
