// The fault matrix (docs/faults.md, docs/fault-matrix.md): every phase an
// operation uses × every rank × every fault kind, on 1 to 4 ranks of
// stories260K.
// Each case ends in exactly one of:
// - committed: the output, and the step after it, equal the unfaulted run;
// - aborted: every rank's state digest and the position equal those before
//   the operation, and running it again gives the unfaulted output;
// - poisoned: every call fails at once naming the poison, until a reset
//   (which starts exited ranks afresh); then the session gives the
//   unfaulted output again.
// No case may take longer than the deadline allows, and a prompt-cache save
// leaves the old generation or the new one live on every rank, never a mix.
//
// Cases run on several threads at once: most of their time is spent waiting
// for deadlines. ACCORD_FAULT_MATRIX_REPORT=PATH writes the outcome counts as
// Markdown (docs/fault-matrix.md is that file).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <thread>
#include <tuple>

#include "actors/coordinator.hpp"
#include "actors/distributed_session.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

using Clock = std::chrono::steady_clock;

// The faulted operation runs on short real deadlines, so that the drop and
// delay faults abort quickly; everything else (the set-up, the run after an
// abort or a reset) on generous ones, with no fault armed, so that a loaded
// machine only makes it slower (docs/invariants.md, invariant 6).
constexpr int kPhaseTimeoutMs = 200;
constexpr int kSetUpTimeoutMs = 10 * 60 * 1000;
// The longest a faulted operation may take: a held-back local work (1.5
// deadlines), the abort's acknowledgement, and room for a loaded machine.
constexpr auto kTimeLimit = std::chrono::milliseconds(4 * kPhaseTimeoutMs + 2000);
const std::vector<int> kPrompt = {1, 403, 407};
const std::vector<int> kShorterPrefix = {1, 403};
constexpr int kNextToken = 432;
// The speculative step's input: kNextToken, then a draft of which greedy
// decoding reproduces the first token only (kept), so the lane both keeps
// and rolls back rows.
const PredictionTargetInput kSpeculation{{kNextToken, 383, 7, 7}, 3};
const PromptCacheDescriptor kDescriptor{"fault-matrix", "tests"};

enum class Operation {
  prefill,
  decode,
  generation,
  prediction,
  checkpoint,
  rollback,
  reset,
  cache_save,
  cache_load,
  snapshot,
  restore,
};
constexpr std::array kOperations = {Operation::prefill,    Operation::decode,     Operation::generation,
                                    Operation::prediction, Operation::checkpoint, Operation::rollback,
                                    Operation::reset,      Operation::cache_save, Operation::cache_load,
                                    Operation::snapshot,   Operation::restore};

std::string name(Operation op) {
  switch (op) {
    case Operation::prefill: return "prefill";
    case Operation::decode: return "decode";
    case Operation::generation: return "generation step";
    case Operation::prediction: return "speculative decode (prediction target)";
    case Operation::checkpoint: return "checkpoint";
    case Operation::rollback: return "rollback";
    case Operation::reset: return "reset";
    case Operation::cache_save: return "save_prompt_cache";
    case Operation::cache_load: return "load_prompt_cache";
    case Operation::snapshot: return "snapshot";
    case Operation::restore: return "restore (a snapshot)";
  }
  return "?";
}

// The transaction an operation runs, to list its phases.
TransactionRequest request_of(Operation op) {
  ForwardStepRequest step;
  switch (op) {
    case Operation::generation: step.sampling = SamplingArguments{}; break;
    case Operation::prediction: step.prediction_target = DraftTokens{kSpeculation.draft_tokens}; break;
    case Operation::checkpoint: return {CheckpointRequest{}};
    case Operation::rollback: return {RollbackRequest{}};
    case Operation::reset: return {ResetRequest{}};
    case Operation::cache_save: return {PromptCacheSaveRequest{}};
    case Operation::cache_load: return {PromptCacheLoadRequest{}};
    case Operation::snapshot: return {SnapshotRequest{}};
    case Operation::restore: return {SnapshotRestoreRequest{}};
    default: break;
  }
  return {step};
}

std::vector<FaultKind> kinds_for(PhaseId phase) {
  std::vector<FaultKind> kinds = {FaultKind::error, FaultKind::throws, FaultKind::delay, FaultKind::exit,
                                  FaultKind::drop};
  if (phase.phase == DistributedExecutionPhase::PromptCacheSavePreparation ||
      phase.phase == DistributedExecutionPhase::PromptCacheSavePublication) {
    kinds.push_back(FaultKind::corrupt);
  }
  return kinds;
}

// One session and what its operation needs.
struct Bench {
  std::unique_ptr<DistributedSession> session;
  std::filesystem::path cache;
  std::optional<DistributedCheckpoint> checkpoint;
  std::optional<SessionSnapshot> snapshot;
};

// What an operation leaves, to compare with the unfaulted run: its own
// output and the logits of the step after it.
struct Observation {
  std::vector<float> output;
  std::vector<float> next;
};

bool same(const Observation& a, const Observation& b) {
  return test::bit_identical(a.output, b.output) && test::bit_identical(a.next, b.next);
}

Error failed(const std::string& what, const Error& error) { return Error(error.code(), what + ": " + error.message()); }

// Brings the bench to where `op` starts.
Status set_up(Operation op, Bench& bench) {
  DistributedSession& s = *bench.session;
  if (op == Operation::prefill) return {};
  if (auto step = s.prefill(kPrompt); !step) return failed("set-up prefill", step.error());
  if (op == Operation::restore) {
    auto snapshot = s.snapshot();
    if (!snapshot) return failed("set-up snapshot", snapshot.error());
    bench.snapshot = std::move(*snapshot);
    if (auto step = s.decode(kNextToken); !step) return failed("set-up decode", step.error());
  }
  if (op == Operation::rollback) {
    auto checkpoint = s.checkpoint();
    if (!checkpoint) return failed("set-up checkpoint", checkpoint.error());
    bench.checkpoint = *checkpoint;
    if (auto step = s.decode(kNextToken); !step) return failed("set-up decode", step.error());
  }
  if (op == Operation::cache_save) {
    // An older generation the faulted save must leave live if it aborts.
    if (auto saved = s.save_prompt_cache(bench.cache, kDescriptor, kShorterPrefix); !saved) {
      return failed("set-up save", saved.error());
    }
  }
  if (op == Operation::cache_load) {
    if (auto saved = s.save_prompt_cache(bench.cache, kDescriptor, kPrompt); !saved) {
      return failed("set-up save", saved.error());
    }
    if (Status reset = s.reset(); !reset) return failed("set-up reset", reset.error());
  }
  return {};
}

std::vector<float> with(std::vector<float> values, std::initializer_list<float> more) {
  values.insert(values.end(), more);
  return values;
}

Result<std::vector<float>> logits_of(Result<DistributedStep> step) {
  if (!step) return step.error();
  return std::move(step->logits);
}

Result<std::vector<float>> perform(Operation op, Bench& bench) {
  DistributedSession& s = *bench.session;
  switch (op) {
    case Operation::prefill: return logits_of(s.prefill(kPrompt));
    case Operation::decode: return logits_of(s.decode(kNextToken));
    case Operation::generation: {
      Sampler sampler({0.9f, 0.9f, 7});
      auto step = test::sample_decode(s, kNextToken, sampler, std::vector<int>{1, 2});
      if (!step) return step.error();
      return with(step->logits, {static_cast<float>(step->sampled.token), static_cast<float>(sampler.rng_state())});
    }
    case Operation::prediction: {
      auto step = test::speculate(s, kSpeculation);
      if (!step) return step.error();
      auto output = step->logits;
      output.insert(output.end(), step->prediction_target_capture.begin(), step->prediction_target_capture.end());
      return with(output, {static_cast<float>(step->accepted), static_cast<float>(step->next_token)});
    }
    case Operation::checkpoint: {
      auto checkpoint = s.checkpoint();
      if (!checkpoint) return checkpoint.error();
      return std::vector<float>{static_cast<float>(checkpoint->position)};
    }
    case Operation::rollback:
      if (Status ok = s.rollback(*bench.checkpoint); !ok) return ok.error();
      return std::vector<float>{};
    case Operation::reset:
      if (Status ok = s.reset(); !ok) return ok.error();
      return std::vector<float>{};
    case Operation::cache_save:
      if (auto saved = s.save_prompt_cache(bench.cache, kDescriptor, kPrompt); !saved) return saved.error();
      return std::vector<float>{};
    case Operation::cache_load:
      if (Status ok = s.load_prompt_cache(bench.cache, kDescriptor, kPrompt); !ok) return ok.error();
      return std::vector<float>{};
    case Operation::snapshot: {
      auto snapshot = s.snapshot();
      if (!snapshot) return snapshot.error();
      return std::vector<float>{static_cast<float>(snapshot->position())};
    }
    case Operation::restore:
      if (Status ok = s.restore(*bench.snapshot); !ok) return ok.error();
      return std::vector<float>{};
  }
  return Error(ErrorCode::contract, "unknown operation");
}

// The logits of one more step: a decode, or a prefill after a reset.
Result<std::vector<float>> next_step(DistributedSession& s) {
  return s.position() == 0 ? logits_of(s.prefill(std::vector<int>{1})) : logits_of(s.decode(406));
}

Result<Observation> observe(Operation op, Bench& bench) {
  auto output = perform(op, bench);
  if (!output) return output.error();
  auto next = next_step(*bench.session);
  if (!next) return failed("the step after", next.error());
  return Observation{std::move(*output), std::move(*next)};
}

DistributedOptions options_for(int ranks, int expert_ranks) {
  DistributedOptions options;
  options.ranks = ranks;
  options.expert_ranks = expert_ranks;
  options.phase_timeout_ms = kPhaseTimeoutMs;
  return options;
}

Result<Bench> make_bench(const Model& model, int ranks, const std::filesystem::path& cache, int expert_ranks = 1) {
  auto session = DistributedSession::create(model, options_for(ranks, expert_ranks));
  if (!session) return session.error();
  if (Status ok = (*session)->set_phase_timeout(kSetUpTimeoutMs); !ok) return ok.error();
  return Bench{std::move(*session), cache, std::nullopt, std::nullopt};
}

enum class Outcome { committed, aborted, poisoned };
constexpr std::array<const char*, 3> kOutcomeNames = {"committed", "aborted", "poisoned"};

struct Case {
  int ranks = 1;
  Operation op = Operation::prefill;
  Fault fault;
  int expert_ranks = 1;
};

struct Verdict {
  Outcome outcome = Outcome::committed;
  std::string failure;  // empty when every check held
};

std::string describe(const Case& c) {
  const std::string experts = c.expert_ranks > 1 ? " (experts over " + std::to_string(c.expert_ranks) + ")" : "";
  return std::to_string(c.ranks) + " rank(s)" + experts + ", " + name(c.op) + ", fault " + to_string(c.fault);
}

// Which generation of the cache a fresh session finds live: the faulted
// save's (the whole prompt), the older one (the shorter prefix), or neither.
std::string live_generation(const Model& model, int ranks, const std::filesystem::path& cache) {
  auto bench = make_bench(model, ranks, cache);
  if (!bench) return "no session: " + bench.error().message();
  if (bench->session->load_prompt_cache(cache, kDescriptor, kPrompt)) return "new";
  if (!bench->session->reset()) return "reset failed";
  if (bench->session->load_prompt_cache(cache, kDescriptor, kShorterPrefix)) return "old";
  return "none";
}

// After a committed save whose shard was corrupted: a load is refused as a
// prompt-cache error and changes nothing.
std::string check_corrupted_cache(const Model& model, int ranks, const std::filesystem::path& cache) {
  auto bench = make_bench(model, ranks, cache);
  if (!bench) return "no session: " + bench.error().message();
  const auto before = bench->session->rank_digests();
  Status load = bench->session->load_prompt_cache(cache, kDescriptor, kPrompt);
  if (load) return "a corrupted shard was loaded";
  if (load.error().code() != ErrorCode::prompt_cache) return "a corrupted shard gave: " + load.error().message();
  const auto after = bench->session->rank_digests();
  if (!before || !after || *before != *after) return "a refused load changed a rank's state";
  return {};
}

bool is_poisoned(const Error& error) { return error.code() == ErrorCode::commit_indeterminate; }

// Runs the faulted operation on the short deadlines, then disarms the
// plan (a fault whose phase was not reached must not fire later) and goes
// back to the generous deadlines.
Result<std::vector<float>> perform_faulted(Operation op, Bench& bench, const Fault& fault) {
  DistributedSession& s = *bench.session;
  if (Status ok = s.inject_faults({fault}); !ok) return failed("arming the fault", ok.error());
  if (Status ok = s.set_phase_timeout(kPhaseTimeoutMs); !ok) return ok.error();
  auto output = perform(op, bench);
  // A rank an exit fault stopped does not answer; a reset starts it afresh,
  // without a plan.
  (void)s.inject_faults({});
  if (Status ok = s.set_phase_timeout(kSetUpTimeoutMs); !ok) return ok.error();
  return output;
}

Verdict run_case(const Model& model, const Case& c, const Observation& expected) {
  test::TempDir folder;
  auto made = make_bench(model, c.ranks, folder.path() / "cache", c.expert_ranks);
  if (!made) return {Outcome::committed, made.error().message()};
  Bench& bench = *made;
  if (Status ok = set_up(c.op, bench); !ok) return {Outcome::committed, ok.error().message()};
  DistributedSession& s = *bench.session;
  const auto digests = s.rank_digests();
  const int position = s.position();
  if (!digests) return {Outcome::committed, digests.error().message()};

  const auto start = Clock::now();
  auto output = perform_faulted(c.op, bench, c.fault);
  if (Clock::now() - start > kTimeLimit) return {Outcome::committed, "the operation outlasted the deadline's margin"};

  if (output) {
    auto next = next_step(s);
    if (!next || !same({*output, *next}, expected)) return {Outcome::committed, "committed with another output"};
    if (c.fault.kind == FaultKind::corrupt) {
      return {Outcome::committed, check_corrupted_cache(model, c.ranks, bench.cache)};
    }
    if (c.op == Operation::cache_save && live_generation(model, c.ranks, bench.cache) != "new") {
      return {Outcome::committed, "the committed save is not live on every rank"};
    }
    return {Outcome::committed, {}};
  }

  if (is_poisoned(output.error())) {
    if (output.error().message().find("poisoned") == std::string::npos) {
      return {Outcome::poisoned, "the error does not say poisoned: " + output.error().message()};
    }
    auto refused = s.decode(kNextToken);
    if (refused || !is_poisoned(refused.error())) return {Outcome::poisoned, "a poisoned session took work"};
    if (Status reset = s.reset(); !reset) return {Outcome::poisoned, "reset: " + reset.error().message()};
    if (Status ok = set_up(c.op, bench); !ok) return {Outcome::poisoned, "after reset, " + ok.error().message()};
    auto again = observe(c.op, bench);
    if (!again || !same(*again, expected)) return {Outcome::poisoned, "after reset, another output"};
    return {Outcome::poisoned, {}};
  }

  // Aborted: every rank as it was, and no half-published cache.
  const auto after = s.rank_digests();
  if (!after || *after != *digests || s.position() != position) {
    return {Outcome::aborted, "aborted, but a rank's state changed: " + output.error().message()};
  }
  if (c.op == Operation::cache_save && live_generation(model, c.ranks, bench.cache) != "old") {
    return {Outcome::aborted, "the aborted save did not leave the old generation live on every rank"};
  }
  auto again = observe(c.op, bench);
  if (!again || !same(*again, expected)) return {Outcome::aborted, "after the abort, another output"};
  return {Outcome::aborted, {}};
}

// Every case of `op` on `ranks` ranks, the experts spread over
// `expert_ranks`, whose phase `wanted` picks.
void add_cases(std::vector<Case>& cases, int ranks, int expert_ranks, Operation op,
               const std::function<bool(const PhaseId&)>& wanted) {
  const SessionRanks session(static_cast<RankId>(ranks), static_cast<RankId>(expert_ranks));
  for (const PhaseId& phase : phases_of(request_of(op), session)) {
    if (!wanted(phase)) continue;
    for (FaultKind kind : kinds_for(phase)) {
      for (int rank = 0; rank < ranks; ++rank) {
        Fault fault;
        fault.rank = static_cast<RankId>(rank);
        fault.phase = phase.phase;
        if (is_boundary_phase(phase.phase)) fault.route = phase.route;
        fault.kind = kind;
        cases.push_back({ranks, op, fault, expert_ranks});
      }
    }
  }
}

std::vector<Case> matrix_cases(int max_ranks) {
  std::vector<Case> cases;
  for (int ranks = 1; ranks <= max_ranks; ++ranks) {
    for (Operation op : kOperations) add_cases(cases, ranks, 1, op, [](const PhaseId&) { return true; });
  }
  return cases;
}

// The outcome counts as Markdown: per operation, and per phase and kind.
void write_report(const std::string& path, const std::vector<Case>& cases, const std::vector<Verdict>& verdicts) {
  std::map<std::string, std::array<int, 3>> by_operation;
  std::map<std::pair<std::string, std::string>, std::array<int, 3>> by_phase_and_kind;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto outcome = static_cast<std::size_t>(verdicts[i].outcome);
    ++by_operation[name(cases[i].op)][outcome];
    ++by_phase_and_kind[{to_string(cases[i].fault.phase), std::string(to_string(cases[i].fault.kind))}][outcome];
  }
  std::ofstream out(path);
  out << "# The fault matrix\n\n"
      << "Written by `tests/fault_matrix_test.cpp` (`ACCORD_FAULT_MATRIX_REPORT=docs/fault-matrix.md "
         "build/tests/accord_tests --gtest_filter='FaultMatrix.*'`): every phase each operation uses, on "
         "every rank, with every fault kind, on 1 to 4 ranks of stories260K; "
      << cases.size() << " scenarios, each checked as the test's header says.\n\n"
      << "Counts are committed / aborted / poisoned.\n\n## By operation\n\n| operation | committed | aborted | "
         "poisoned |\n|---|---|---|---|\n";
  for (const auto& [op, n] : by_operation)
    out << "| " << op << " | " << n[0] << " | " << n[1] << " | " << n[2] << " |\n";
  out << "\n## By phase and kind\n\n| phase | kind | committed | aborted | poisoned |\n|---|---|---|---|---|\n";
  for (const auto& [key, n] : by_phase_and_kind) {
    out << "| " << key.first << " | " << key.second << " | " << n[0] << " | " << n[1] << " | " << n[2] << " |\n";
  }
}

// Each case's verdict, on several threads; `expected`: the unfaulted
// observation of each case's operation on its ranks.
using Expected = std::map<std::tuple<int, int, Operation>, Observation>;

std::vector<Verdict> run_cases(const Model& model, const std::vector<Case>& cases, const Expected& expected) {
  std::vector<Verdict> verdicts(cases.size());
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> runners;
  for (int t = 0; t < 8; ++t) {
    runners.emplace_back([&] {
      for (std::size_t i = next++; i < cases.size(); i = next++) {
        const Case& c = cases[i];
        verdicts[i] = run_case(model, c, expected.at({c.ranks, c.expert_ranks, c.op}));
      }
    });
  }
  for (auto& runner : runners) runner.join();
  return verdicts;
}

// The unfaulted observation of `op` on `ranks` ranks into `expected`.
void observe_unfaulted(const Model& model, int ranks, int expert_ranks, Operation op, Expected& expected) {
  test::TempDir cache;
  auto bench = make_bench(model, ranks, cache.path() / "cache", expert_ranks);
  ASSERT_TRUE(bench) << bench.error().message();
  ASSERT_TRUE(set_up(op, *bench));
  auto observed = observe(op, *bench);
  ASSERT_TRUE(observed) << name(op) << ": " << observed.error().message();
  expected[{ranks, expert_ranks, op}] = std::move(*observed);
}

TEST(FaultMatrix, EveryPhaseRankAndKindCommitsAbortsOrPoisonsCleanly) {
  const Model model = test::load_stories_model();
  const std::vector<Case> cases = matrix_cases(4);
  Expected expected;
  for (int ranks = 1; ranks <= 4; ++ranks) {
    for (Operation op : kOperations) observe_unfaulted(model, ranks, 1, op, expected);
  }
  const std::vector<Verdict> verdicts = run_cases(model, cases, expected);

  std::array<int, 3> totals{};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    ++totals[static_cast<std::size_t>(verdicts[i].outcome)];
    EXPECT_TRUE(verdicts[i].failure.empty()) << describe(cases[i]) << ": " << verdicts[i].failure;
  }
  std::cout << "[ matrix   ] " << cases.size() << " scenarios: " << totals[0] << " committed, " << totals[1]
            << " aborted, " << totals[2] << " poisoned\n";
  // Every kind is seen to do something: the plan fires.
  EXPECT_GT(totals[1], 0);
  EXPECT_GT(totals[2], 0);
  if (const char* path = std::getenv("ACCORD_FAULT_MATRIX_REPORT")) write_report(path, cases, verdicts);
}

// The expert routes (docs/protocol.md, "Expert routes") of the zoo's Mixtral
// file, its experts over 2 and over 3 of 3 ranks: every expert-route phase
// of every forward operation, on every rank, with every fault kind, ends as
// the header says.
TEST(FaultMatrix, EveryExpertRouteRankAndKindCommitsAbortsOrPoisonsCleanly) {
  auto model = Model::load((test::shared_dir() / "models" / "zoo" / "mixtral-Q4_K_M.gguf").string());
  ASSERT_TRUE(model) << model.error().message();
  const auto expert_route = [](const PhaseId& phase) { return phase.route.kind == RouteKind::experts; };
  std::vector<Case> cases;
  Expected expected;
  for (int expert_ranks : {2, 3}) {
    for (Operation op : {Operation::prefill, Operation::decode, Operation::generation, Operation::prediction}) {
      add_cases(cases, 3, expert_ranks, op, expert_route);
      observe_unfaulted(*model, 3, expert_ranks, op, expected);
    }
  }
  const std::vector<Verdict> verdicts = run_cases(*model, cases, expected);
  std::array<int, 3> totals{};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    ++totals[static_cast<std::size_t>(verdicts[i].outcome)];
    EXPECT_TRUE(verdicts[i].failure.empty()) << describe(cases[i]) << ": " << verdicts[i].failure;
  }
  std::cout << "[ matrix   ] " << cases.size() << " expert-route scenarios: " << totals[0] << " committed, "
            << totals[1] << " aborted, " << totals[2] << " poisoned\n";
  EXPECT_GT(totals[1], 0);
  EXPECT_GT(totals[2], 0);
}

}  // namespace
}  // namespace accord
