#include "apps/accord/options.hpp"

#include <charconv>
#include <cstdint>
#include <limits>
#include <string>

#include "apps/accord/commands.hpp"
#include "kernels/cpu/thread_pool.hpp"

namespace accord::cli {

CLI::Validator seed_range() {
  return CLI::Validator(
      [](std::string& text) {
        std::uint64_t seed = 0;
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, seed);
        if (!text.empty() && error == std::errc() && stop == end) return std::string();
        return "expected a whole number from 0 to " + std::to_string(std::numeric_limits<std::uint64_t>::max()) +
               ", got '" + text + "'";
      },
      "");
}

int capped_threads(int requested) {
  const int limit = cpu::max_useful_threads();
  if (requested <= limit) return requested;
  warn("--threads " + std::to_string(requested) + " is more than " + std::to_string(cpu::kThreadsPerCore) +
       " per core of this machine; using " + std::to_string(limit));
  return limit;
}

BackendChoice BackendArgs::choice() const {
  return {backend == "cuda" ? BackendChoice::Kind::cuda : BackendChoice::Kind::cpu, devices};
}

void add_backend_options(CLI::App& cmd, BackendArgs& args) {
  cmd.add_option("--backend", args.backend,
                 "where the ranks compute: cpu (the default), or cuda (a build with nvcc and a machine with a GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd.add_option("--devices", args.devices,
                 "with --backend cuda: the CUDA devices, comma-separated; rank r computes on the (r mod count)-th, "
                 "so ranks may share one (default: 0)")
      ->delimiter(',')
      ->check(CLI::Range(0, 4095));
}

Result<BackendChoice> checked_backend(const BackendArgs& args) {
  const BackendChoice choice = args.choice();
  if (Status ok = check_backend(choice); !ok) return ok.error();
  return choice;
}

}  // namespace accord::cli
