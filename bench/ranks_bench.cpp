// What ranks cost, measured so that the host's noise falls on
// both sides alike: a plain session and a session of N in-process ranks
// over the same model in one process, decoding greedily in turns of a few
// tokens (a block), so that each ratio compares runs some hundred
// milliseconds apart rather than separate processes seconds apart
// (bench/ranks.sh). Each block is the generator's pattern: every step but a
// block's last asks for the next one (NextDecode::likely, a chained step on
// the ranks), the last does not, so nothing runs while the other session
// takes its turn. Both sessions pick the same tokens, or the run fails.
//
//   accord_ranks_bench [SHAPE] [BLOCKS] [BLOCK_TOKENS] [THREADS] [RANKS...]
//   defaults: 110M 24 8 2 2 3 4
//
// Prints a markdown table: decode tok/s over the timed blocks, the ratio to
// the plain session (the median of each pair of blocks' ratios, with the
// lowest and highest), the protocol's wall time per step that the ranks
// did not spend computing, with its share of a step, and the C++ heap
// allocations a token of each side made (bench/allocation_count.hpp).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "actors/distributed_session.hpp"
#include "actors/distributed_target.hpp"
#include "bench/allocation_count.hpp"
#include "bench/model_store.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/generate/target.hpp"
#include "runtime/session/session.hpp"

namespace {

using namespace accord;

constexpr int kPromptTokens = 4;

struct Options {
  std::string shape = "110M";
  int blocks = 24;
  int block_tokens = 8;
  int threads = 2;
  std::vector<int> ranks = {2, 3, 4};
};

int positive(const char* text, const char* what) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 1 || value > 4096) {
    std::fprintf(stderr, "accord_ranks_bench: %s must be a whole number from 1 to 4096, not \"%s\"\n", what, text);
    std::exit(2);
  }
  return static_cast<int>(value);
}

Options parse(int argc, char** argv) {
  Options options;
  if (argc > 1) options.shape = argv[1];
  if (argc > 2) options.blocks = positive(argv[2], "BLOCKS");
  if (argc > 3) options.block_tokens = positive(argv[3], "BLOCK_TOKENS");
  if (argc > 4) options.threads = positive(argv[4], "THREADS");
  if (argc > 5) options.ranks.clear();
  for (int i = 5; i < argc; ++i) options.ranks.push_back(positive(argv[i], "RANKS"));
  return options;
}

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "accord_ranks_bench: %s\n", what.c_str());
  std::exit(1);
}

// One side of the comparison: a target, its sampler and the last token.
struct Side {
  explicit Side(GenerationTarget& t) : target(&t) {}

  GenerationTarget* target;
  Sampler sampler{SamplerOptions{0.0f, 1.0f, 0}};
  int token = 0;
  std::vector<int> picked;        // every token it sampled, in order
  std::uint64_t allocations = 0;  // C++ heap allocations in its blocks, from any thread
};

// The fixed prompt, then the first pick.
void start(Side& side) {
  std::vector<int> prompt;
  for (int i = 0; i < kPromptTokens; ++i) prompt.push_back(1 + i * 7919 % 1000);
  auto first = side.target->prefill_and_sample(prompt, side.sampler, {});
  if (!first) fail("prefill: " + first.error().message());
  side.token = first->token;
  side.picked = {side.token};
}

// Decodes one block; returns its wall seconds.
double run_block(Side& side, int tokens) {
  const std::uint64_t allocations_before = bench::allocations();
  const auto started = std::chrono::steady_clock::now();
  for (int i = 0; i < tokens; ++i) {
    const NextDecode next = i + 1 < tokens ? NextDecode::likely : NextDecode::unlikely;
    auto step = side.target->decode_and_sample(side.token, side.sampler, {}, next);
    if (!step) fail("decode: " + step.error().message());
    side.token = step->token;
    side.picked.push_back(side.token);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  side.allocations += bench::allocations() - allocations_before;
  return seconds;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

struct Comparison {
  double plain_seconds = 0;
  double ranks_seconds = 0;
  std::vector<double> ratios;    // per pair of blocks: plain time / ranks time
  DistributedStats timed;        // the ranks' figures over the timed blocks
  double plain_allocations = 0;  // a token, over the timed blocks
  double ranks_allocations = 0;
};

// Plain and ranks take turns, each pair in the opposite order to the last,
// so that neither always follows the other.
Comparison compare(Side& plain, Side& ranks, DistributedSession& session, const Options& options) {
  Comparison result;
  run_block(plain, options.block_tokens);  // warm-up: first touches of the weights and caches
  run_block(ranks, options.block_tokens);
  const DistributedStats before = session.stats();
  const std::uint64_t plain_before = plain.allocations;
  const std::uint64_t ranks_before = ranks.allocations;
  for (int b = 0; b < options.blocks; ++b) {
    double plain_block = 0;
    double ranks_block = 0;
    if (b % 2 == 0) {
      plain_block = run_block(plain, options.block_tokens);
      ranks_block = run_block(ranks, options.block_tokens);
    } else {
      ranks_block = run_block(ranks, options.block_tokens);
      plain_block = run_block(plain, options.block_tokens);
    }
    result.plain_seconds += plain_block;
    result.ranks_seconds += ranks_block;
    result.ratios.push_back(plain_block / ranks_block);
  }
  result.timed = session.stats().since(before);
  const double tokens = static_cast<double>(options.blocks) * options.block_tokens;
  result.plain_allocations = static_cast<double>(plain.allocations - plain_before) / tokens;
  result.ranks_allocations = static_cast<double>(ranks.allocations - ranks_before) / tokens;
  return result;
}

void print_row(const Options& options, int ranks, const Comparison& c) {
  const double tokens = static_cast<double>(options.blocks) * options.block_tokens;
  const auto [low, high] = std::minmax_element(c.ratios.begin(), c.ratios.end());
  std::printf("| %s | ranks:%d | %.1f | %.1f | %.3f (%.2f-%.2f) | %.3f | %.0f | %.2f%% | %.0f / %.0f |\n",
              options.shape.c_str(), ranks, tokens / c.plain_seconds, tokens / c.ranks_seconds, median(c.ratios), *low,
              *high, c.plain_seconds / c.ranks_seconds, c.timed.protocol_microseconds_per_step(),
              100 * c.timed.protocol_share(), c.plain_allocations, c.ranks_allocations);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  const auto shape = bench::shape_named(options.shape);
  if (!shape) fail("unknown shape \"" + options.shape + "\" (15M or 110M)");
  const int needed = kPromptTokens + 1 + (options.blocks + 1) * options.block_tokens;
  if (needed > shape->config.seq_len) {
    fail("BLOCKS and BLOCK_TOKENS need " + std::to_string(needed) + " positions; the " + options.shape +
         " context has " + std::to_string(shape->config.seq_len));
  }
  std::string error;
  const Model* model = bench::ModelStore::instance().get(*shape, error);
  if (model == nullptr) fail(error);

  cpu::ThreadPool pool(options.threads);
  Session plain_session(*model, pool);
  SessionTarget plain_target(plain_session);

  std::printf("threads: %d; %d blocks of %d tokens a side, taking turns\n\n", options.threads, options.blocks,
              options.block_tokens);
  std::printf(
      "| shape | run | plain tok/s | ranks tok/s | vs plain, median of blocks (range) | vs plain, all blocks "
      "| protocol us/token | protocol share | allocations a token, plain / ranks |\n"
      "|---|---|---|---|---|---|---|---|---|\n");
  for (int ranks : options.ranks) {
    DistributedOptions distributed;
    distributed.ranks = ranks;
    distributed.threads = options.threads;
    auto session = DistributedSession::create(*model, distributed);
    if (!session) fail("ranks " + std::to_string(ranks) + ": " + session.error().message());
    DistributedTarget ranks_target(**session, *model);

    if (Status reset = plain_session.reset(); !reset) fail("reset: " + reset.error().message());
    Side plain(plain_target);
    Side distributed_side(ranks_target);
    start(plain);
    start(distributed_side);
    const Comparison comparison = compare(plain, distributed_side, **session, options);
    if (plain.picked != distributed_side.picked) fail("ranks " + std::to_string(ranks) + " picked other tokens");
    print_row(options, ranks, comparison);
  }
  return 0;
}
