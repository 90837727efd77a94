// accord-sim: the whole cluster in one thread, on a simulated network and
// clock, one seed per run (docs/simulation.md).
//
//   accord-sim --seeds 10000 --from 1   runs seeds 1..10000
//   accord-sim --seed 42                replays seed 42 and prints its trace
//
// The last line states the seeds run, the routed steps among them and the
// violations found; the exit code is 1 on any violation (or with
// --min-routed-steps N, on fewer routed steps than N), 2 on a usage error.
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
// attention and four units (so up to four ranks); `routed`: each unit's
// feed-forward is six experts of which two route each token (a GGUF file).
accord::Result<accord::Model> tiny_model(bool routed) {
  accord::SyntheticModelOptions options;
  options.config.dim = 16;
  options.config.hidden_dim = routed ? 12 : 24;
  options.config.n_experts = routed ? 6 : 0;
  options.config.n_experts_used = routed ? 2 : 0;
  options.config.n_layers = 4;
  options.config.n_heads = 4;
  options.config.n_kv_heads = 2;
  options.config.vocab_size = 32;
  options.config.seq_len = 48;
  options.seed = 17;
  const auto path = std::filesystem::temp_directory_path() /
                    ("accord-sim-" + std::to_string(::getpid()) + (routed ? "-routed.gguf" : ".bin"));
  accord::Status written = accord::write_synthetic_model(path.string(), options);
  auto model = written ? accord::Model::load(path.string()) : accord::Result<accord::Model>(written.error());
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
  return model;
}

// What the seeds ran, summed.
struct Totals {
  std::uint64_t violations = 0;
  std::uint64_t operations = 0;
  std::uint64_t committed = 0;
  std::uint64_t ranks_lost = 0;
  std::uint64_t power_losses = 0;
  std::uint64_t routed_steps = 0;
  std::uint64_t routed_committed = 0;
  std::uint64_t routed_aborted = 0;
  std::uint64_t routed_poisoned = 0;
  std::uint64_t expert_transfers = 0;

  void add(const accord::sim::SeedReport& report) {
    violations += report.violations.size();
    operations += static_cast<std::uint64_t>(report.operations);
    committed += static_cast<std::uint64_t>(report.committed);
    ranks_lost += report.crashes + report.cuts;
    power_losses += report.power_losses;
    routed_steps += static_cast<std::uint64_t>(report.routed_steps);
    routed_committed += static_cast<std::uint64_t>(report.routed_committed);
    routed_aborted += static_cast<std::uint64_t>(report.routed_aborted);
    routed_poisoned += static_cast<std::uint64_t>(report.routed_poisoned);
    expert_transfers += report.expert_transfers;
  }
};

using ull = unsigned long long;

void print_summary(std::uint64_t seeds, std::uint64_t from, const Totals& t, double seconds) {
  std::printf(
      "accord-sim: %llu seeds (%llu..%llu), %llu operations (%llu committed), %llu routed steps (%llu committed, "
      "%llu aborted, %llu poisoned; %llu expert transfers), %llu ranks lost, %llu power losses, %.1f s: "
      "%llu violations\n",
      static_cast<ull>(seeds), static_cast<ull>(from), static_cast<ull>(from + seeds - 1),
      static_cast<ull>(t.operations), static_cast<ull>(t.committed), static_cast<ull>(t.routed_steps),
      static_cast<ull>(t.routed_committed), static_cast<ull>(t.routed_aborted), static_cast<ull>(t.routed_poisoned),
      static_cast<ull>(t.expert_transfers), static_cast<ull>(t.ranks_lost), static_cast<ull>(t.power_losses), seconds,
      static_cast<ull>(t.violations));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"accord-sim: seeded simulation of a whole accord cluster in one thread"};
  std::uint64_t seeds = 1000;
  std::uint64_t from = 1;
  std::uint64_t min_routed_steps = 0;
  std::optional<std::uint64_t> replay;
  app.add_option("--seeds", seeds, "how many seeds to run")->check(CLI::PositiveNumber);
  app.add_option("--from", from, "the first seed");
  app.add_option("--seed", replay, "replay one seed and print its trace");
  app.add_option("--min-routed-steps", min_routed_steps,
                 "fail unless at least this many steps ran over expert routes (default 0)");
  CLI11_PARSE(app, argc, argv);

  auto dense = tiny_model(false);
  auto routed = tiny_model(true);
  for (const auto* model : {&dense, &routed}) {
    if (*model) continue;
    std::fprintf(stderr, "accord-sim: %s\n", model->error().message().c_str());
    return 1;
  }
  const accord::sim::SimModel dense_model{*dense, accord::model_identity(*dense)};
  const accord::sim::SimModel routed_model{*routed, accord::model_identity(*routed)};
  if (replay) {
    from = *replay;
    seeds = 1;
  }
  const auto start = std::chrono::steady_clock::now();
  Totals totals;
  for (std::uint64_t seed = from; seed < from + seeds; ++seed) {
    const accord::sim::SeedReport report = accord::sim::run_seed(seed, dense_model, routed_model, replay.has_value());
    for (const auto& line : report.trace) std::printf("  %s\n", line.c_str());
    for (const auto& v : report.violations) {
      std::printf("seed %llu: VIOLATION at %s\n  replay: accord-sim --seed %llu\n", static_cast<ull>(seed), v.c_str(),
                  static_cast<ull>(seed));
    }
    totals.add(report);
  }
  print_summary(seeds, from, totals, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (totals.routed_steps < min_routed_steps) {
    std::printf("accord-sim: %llu routed steps, fewer than --min-routed-steps %llu\n",
                static_cast<ull>(totals.routed_steps), static_cast<ull>(min_routed_steps));
    return 1;
  }
  return totals.violations == 0 ? 0 : 1;
}
