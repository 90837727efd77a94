#include "apps/accord/options.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <utility>

#include "apps/accord/commands.hpp"
#include "kernels/cpu/thread_pool.hpp"

namespace accord::cli {

namespace {

constexpr std::string_view kRandomSeed = "-1";

bool is_whole_number(const std::string& text) {
  std::uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  return !text.empty() && error == std::errc() && stop == end;
}

std::string whole_number_expected() {
  return "expected a whole number from 0 to " + std::to_string(std::numeric_limits<std::uint64_t>::max());
}

// A validator of a float option: `accepts` judges the value CLI11 would
// read, so that the check and the option agree on what the text means.
// Text that is no number passes here and CLI11 refuses it itself.
CLI::Validator float_check(bool (*accepts)(float), std::string expected) {
  return CLI::Validator(
      [accepts, expected](std::string& text) {
        float value = 0.0f;
        if (!CLI::detail::lexical_cast(text, value) || accepts(value)) return std::string();
        return "expected " + expected + ", got '" + text + "'";
      },
      "");
}

}  // namespace

CLI::Validator whole_number_range() {
  return CLI::Validator(
      [](std::string& text) {
        return is_whole_number(text) ? std::string() : whole_number_expected() + ", got '" + text + "'";
      },
      "");
}

CLI::Validator sampler_seed_range() {
  return CLI::Validator(
      [](std::string& text) {
        if (text == kRandomSeed || is_whole_number(text)) return std::string();
        return whole_number_expected() + ", or -1 for a random seed, got '" + text + "'";
      },
      "");
}

SamplerSeed sampler_seed(const std::string& text) {
  if (text == kRandomSeed) {
    std::random_device device;  // 32 bits a draw
    return {(std::uint64_t{device()} << 32) | device(), true};
  }
  SamplerSeed seed;
  std::from_chars(text.data(), text.data() + text.size(), seed.value);
  return seed;
}

CLI::Validator finite_at_least_zero() {
  return float_check([](float value) { return std::isfinite(value) && value >= 0.0f; }, "a finite number >= 0");
}

CLI::Validator above_zero_up_to_one() {
  return float_check([](float value) { return value > 0.0f && value <= 1.0f; }, "a number in (0, 1]");
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

void add_context_option(CLI::App& cmd, int& context) {
  cmd.add_option("--ctx-size", context,
                 "positions a session holds, prompt and reply together: the model file's context length where "
                 "that is smaller (each session keeps keys and values for all of them)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
}

void add_kv_type_option(CLI::App& cmd, KvType& type) {
  cmd.add_option_function<std::string>(
         "--kv-type", [&type](const std::string& name) { type = *parse_kv_type(name); },
         "keys and values in f32 (the default: the references' bits), f16 (half the memory and traffic) or q8_0 "
         "(34 bytes per 32 values, a model whose kv_dim is a multiple of 32)")
      ->check(CLI::IsMember({"f32", "f16", "q8_0"}));
}

void add_kv_budget_option(CLI::App& cmd, std::uint64_t& bytes, const std::string& holders) {
  cmd.add_option("--kv-budget-bytes", bytes,
                 "the most bytes of keys and values " + holders +
                     " hold together, taken as their positions fill; a step past it aborts (default 0: no budget "
                     "but each session's context)")
      ->check(whole_number_range());
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

std::function<void(const std::string&)> node_list(std::vector<NodeAddress>& nodes, const std::string& option) {
  return [&nodes, option](const std::string& text) {
    auto parsed = parse_peers(text);
    if (!parsed) throw CLI::ValidationError(option, parsed.error().message());
    nodes = std::move(*parsed);
  };
}

Result<BackendChoice> checked_backend(const BackendArgs& args) {
  const BackendChoice choice = args.choice();
  if (Status ok = check_backend(choice); !ok) return ok.error();
  return choice;
}

}  // namespace accord::cli
