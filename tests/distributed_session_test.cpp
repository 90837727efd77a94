// The distributed session: N in-process ranks of CAF actors agree on every
// phase and give the tokens and logits of one rank (docs/invariants.md,
// invariant 1); checkpoints, rollback and reset run on every rank; a failed
// phase aborts everywhere; a rank that is gone poisons the session.
#include "actors/distributed_session.hpp"
#include "actors/distributed_target.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>

#include "runtime/fault/fault_plan.hpp"
#include "runtime/generate/generator.hpp"
#include "runtime/text/sampler.hpp"
#include "tests/reference.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

std::unique_ptr<DistributedSession> make_session(const Model& model, int ranks, std::vector<int> counts = {}) {
  DistributedOptions options;
  options.ranks = ranks;
  options.unit_counts = std::move(counts);
  auto session = DistributedSession::create(model, options);
  if (!session) {
    ADD_FAILURE() << session.error().message();
    return nullptr;
  }
  return std::move(*session);
}

std::vector<float> single_rank_trace(const Model& model, std::span<const int> prompt, int steps) {
  cpu::ThreadPool pool(1);
  Session session(model, pool);
  std::vector<float> trace;
  auto step = session.prefill(prompt);
  for (int i = 0;; ++i) {
    trace.insert(trace.end(), step->logits.begin(), step->logits.end());
    if (i == steps) return trace;
    step = session.decode(argmax(step->logits));
  }
}

const std::vector<int> kObservedPrompt = {1, 403, 407, 261};

TEST(DistributedSession, OneToFiveRanksMatchRunCAndOneRank) {
  const Model model = test::load_stories_model();
  const auto reference = test::greedy_cases().at(1);  // "Once upon a time"
  const int steps = static_cast<int>(reference.generated_tokens.size()) - 1;
  const auto expected = single_rank_trace(model, reference.prompt_tokens, steps);
  for (int ranks = 1; ranks <= 5; ++ranks) {
    auto session = make_session(model, ranks);
    ASSERT_TRUE(session);
    EXPECT_EQ(session->ranks(), ranks);
    const auto trace = test::greedy_trace(*session, reference.prompt_tokens, steps);
    EXPECT_TRUE(test::bit_identical(trace, expected)) << ranks << " ranks";
    std::vector<int> tokens;
    for (std::size_t row = 0; row * 512 < trace.size(); ++row) {
      tokens.push_back(argmax(std::span<const float>(trace).subspan(row * 512, 512)));
    }
    EXPECT_EQ(tokens, reference.generated_tokens) << ranks << " ranks";
  }
}

// A service that embeds accord injects the faults it passes, never those of
// a variable set in its environment (read_environment() is for commands).
TEST(DistributedSession, ReadsNoFaultsFromTheEnvironment) {
  const Model model = test::load_stories_model();
  ::setenv("ACCORD_FAULTS", "0:Execution:error", 1);
  auto session = make_session(model, 2);
  ::unsetenv("ACCORD_FAULTS");
  ASSERT_TRUE(session);
  auto step = session->prefill(std::vector<int>{1, 403});
  EXPECT_TRUE(step) << step.error().message();
}

TEST(DistributedSession, UnevenPartitionsOfASyntheticModelAgree) {
  test::TempDir dir;
  ModelConfig c = test::small_config();
  c.n_layers = 6;
  const Model model = test::synthetic_model(dir, {c, 9, llama2c::Layout::legacy});
  const std::vector<int> prompt = {1, 20, 30, 40, 50};
  const auto expected = single_rank_trace(model, prompt, 5);
  for (const auto& counts : std::vector<std::vector<int>>{{1, 5}, {2, 2, 2}, {3, 1, 1, 1}}) {
    auto session = make_session(model, static_cast<int>(counts.size()), counts);
    ASSERT_TRUE(session);
    EXPECT_TRUE(test::bit_identical(test::greedy_trace(*session, prompt, 5), expected)) << counts.size() << " ranks";
  }
}

TEST(DistributedSession, ForwardReturnsEveryRow) {
  const Model model = test::load_stories_model();
  auto session = make_session(model, 3);
  const std::vector<int> prompt = {1, 403, 407};
  auto all = session->forward(prompt);
  ASSERT_TRUE(all) << all.error().message();
  EXPECT_EQ(all->rows, 3);
  EXPECT_EQ(all->logits.size(), 3u * 512);
  EXPECT_EQ(session->position(), 3);
}

TEST(DistributedSession, CheckpointRollbackAndResetRunOnEveryRank) {
  const Model model = test::load_stories_model();
  auto session = make_session(model, 3);
  const std::vector<int> prompt = {1, 403, 407, 261, 378};
  ASSERT_TRUE(session->prefill(prompt));
  auto checkpoint = session->checkpoint();
  ASSERT_TRUE(checkpoint) << checkpoint.error().message();
  EXPECT_EQ(checkpoint->position, 5);
  ASSERT_EQ(checkpoint->rank_digests.size(), 3u);
  std::vector<std::vector<float>> first;
  for (int token : {432, 383, 286}) first.push_back(session->decode(token)->logits);

  ASSERT_TRUE(session->rollback(*checkpoint));
  EXPECT_EQ(session->position(), 5);
  auto again = session->checkpoint();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->rank_digests, checkpoint->rank_digests);
  int i = 0;
  for (int token : {432, 383, 286}) EXPECT_TRUE(test::bit_identical(session->decode(token)->logits, first[i++]));

  // Rewriting a row below a later checkpoint makes it unprovable: every
  // rank refuses, the transaction aborts, and the session goes on.
  auto late = session->checkpoint();
  ASSERT_TRUE(session->rollback(*checkpoint));
  ASSERT_TRUE(session->decode(99));
  Status refused = session->rollback(*late);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), ErrorCode::state);
  EXPECT_NE(refused.error().message().find("overwritten"), std::string::npos);
  EXPECT_EQ(refused.error().phase(), "SessionRollbackPreparation");
  EXPECT_TRUE(session->decode(5));

  ASSERT_TRUE(session->reset());
  EXPECT_EQ(session->position(), 0);
  EXPECT_FALSE(session->rollback(*checkpoint)) << "checkpoints do not survive a reset";
  const auto fresh = single_rank_trace(model, prompt, 0);
  EXPECT_TRUE(test::bit_identical(session->prefill(prompt)->logits, fresh));
}

// The same calls, with one step failing in Execution, leave a one-rank
// Session and a two-rank session with the same report but for the digest
// (one rank's against a digest of every rank's).
TEST(DistributedSession, ItsReportSaysWhatAOneRankSessionsSays) {
  const Model model = test::load_stories_model();
  auto distributed = make_session(model, 2);
  ASSERT_TRUE(distributed);
  cpu::ThreadPool pool(1);
  Session single(model, pool);
  const std::vector<int> prompt = {1, 403, 407, 261, 378};

  ASSERT_TRUE(single.prefill(prompt));
  ASSERT_TRUE(distributed->prefill(prompt));
  auto single_checkpoint = single.checkpoint();
  auto distributed_checkpoint = distributed->checkpoint();
  ASSERT_TRUE(single_checkpoint && distributed_checkpoint);
  ASSERT_TRUE(single.decode(432));
  ASSERT_TRUE(distributed->decode(432));
  single.set_failure_hook(test::fail_every(Phase::Execution));
  ASSERT_TRUE(distributed->inject_faults({*parse_fault("1:Execution:error")}));
  EXPECT_FALSE(single.decode(383));
  EXPECT_FALSE(distributed->decode(383));
  single.set_failure_hook({});
  ASSERT_TRUE(distributed->inject_faults({}));
  ASSERT_TRUE(single.rollback(*single_checkpoint));
  ASSERT_TRUE(distributed->rollback(*distributed_checkpoint));
  ASSERT_TRUE(single.decode(286));
  ASSERT_TRUE(distributed->decode(286));

  const SessionReport one = single.report();
  auto many = distributed->report();
  ASSERT_TRUE(many) << many.error().message();
  EXPECT_EQ(many->model_identity, one.model_identity);
  EXPECT_EQ(many->weights_bytes, one.weights_bytes);
  EXPECT_EQ(many->weights_bytes_by_type, one.weights_bytes_by_type);
  EXPECT_EQ(many->kv_bytes_used, one.kv_bytes_used);
  EXPECT_EQ(many->kv_bytes_capacity, one.kv_bytes_capacity);
  EXPECT_EQ(many->position, one.position);
  EXPECT_EQ(many->context, one.context);
  EXPECT_EQ(many->last_epoch, one.last_epoch);
  EXPECT_EQ(many->committed_epoch, one.committed_epoch);
  EXPECT_EQ(many->state_epoch, one.state_epoch);
  EXPECT_EQ(many->last_outcome, "committed");
  EXPECT_EQ(many->aborted_transactions, 1u);
  EXPECT_EQ(one.aborted_transactions, 1u);
  EXPECT_EQ(many->restoration_generation, 2u) << "the aborted step and the rollback";
  EXPECT_EQ(one.restoration_generation, 2u);
  EXPECT_EQ(distributed->successful_state_restoration_generation(), 2u);
  EXPECT_EQ(many->state_digest.size(), one.state_digest.size());

  const MaterializationReport single_kv = single.materialization_report();
  auto distributed_kv = distributed->materialization_report();
  ASSERT_TRUE(distributed_kv) << distributed_kv.error().message();
  EXPECT_EQ(distributed_kv->kv_allocated_bytes, single_kv.kv_allocated_bytes);
  EXPECT_EQ(distributed_kv->kv_materialized_bytes, single_kv.kv_materialized_bytes);
  EXPECT_EQ(distributed_kv->high_water_position, single_kv.high_water_position);
  EXPECT_EQ(distributed_kv->weights_mapped_bytes, single_kv.weights_mapped_bytes);
}

TEST(DistributedSession, BadInputIsRefusedBeforeAnyRankChanges) {
  const Model model = test::load_stories_model();
  auto session = make_session(model, 2);
  ASSERT_TRUE(session->prefill(std::vector<int>{1, 403}));
  auto bad = session->decode(512);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), ErrorCode::contract);
  EXPECT_TRUE(bad.error().before_state_mutation());
  EXPECT_EQ(session->position(), 2);
  EXPECT_TRUE(session->decode(407));
}

TEST(DistributedSession, ARankThatIsGonePoisonsTheSessionUntilAResetRestartsIt) {
  const Model model = test::load_stories_model();
  DistributedOptions options;
  options.ranks = 3;
  auto created = DistributedSession::create(model, options);
  ASSERT_TRUE(created);
  auto& session = **created;
  ASSERT_TRUE(session.prefill(std::vector<int>{1, 403}));
  ASSERT_TRUE(session.stop_rank(1));
  // Whether the down message or the deadline reaches the coordinator
  // first, the step cannot commit and the session is poisoned.
  auto step = session.decode(407);
  ASSERT_FALSE(step);
  EXPECT_EQ(step.error().code(), ErrorCode::commit_indeterminate);
  EXPECT_NE(step.error().message().find("poisoned"), std::string::npos) << step.error().message();
  EXPECT_NE(step.error().message().find("rank 1"), std::string::npos) << step.error().message();
  // Every later call fails at once with the cause.
  auto again = session.decode(407);
  ASSERT_FALSE(again);
  EXPECT_NE(again.error().message().find("poisoned"), std::string::npos);
  // A reset starts rank 1 afresh and brings it in; the session then works
  // as a new one does, and rank 1 answers again.
  Status reset = session.reset();
  ASSERT_TRUE(reset) << reset.error().message();
  EXPECT_EQ(session.position(), 0);
  auto restarted = session.prefill(std::vector<int>{1, 403, 407});
  ASSERT_TRUE(restarted) << restarted.error().message();
  auto fresh = make_session(model, 3);
  ASSERT_TRUE(fresh);
  EXPECT_TRUE(test::bit_identical(restarted->logits, fresh->prefill(std::vector<int>{1, 403, 407})->logits));
  auto digests = session.rank_digests();
  ASSERT_TRUE(digests) << digests.error().message();
  EXPECT_EQ(digests->size(), 3u);
}

// --- observers across ranks ------------------------------------------------

// Records what it sees; optionally steers: scales every unit's output by
// `hidden_scale` and raises one logit far above the others.
class RecordingObserver final : public StepObserver {
 public:
  struct UnitOutput {
    int unit;
    int first_position;
    std::vector<float> hidden;
    bool operator==(const UnitOutput&) const = default;
  };
  std::vector<UnitOutput> units;
  std::vector<float> logits;
  float hidden_scale = 1.0f;
  int raised_logit = -1;

  Status on_unit_output(int unit, int first_position, std::span<float> hidden, int) override {
    for (float& v : hidden) v *= hidden_scale;
    units.push_back({unit, first_position, test::to_vector(hidden)});
    return {};
  }
  Status on_logits(int, std::span<float> values, int) override {
    if (raised_logit >= 0) values[static_cast<std::size_t>(raised_logit)] = 1000.0f;
    logits.insert(logits.end(), values.begin(), values.end());
    return {};
  }
};

// A prefill, a decode and a forward with `observer` on one rank, and the
// logits the caller received.
std::vector<float> single_rank_observed(const Model& model, RecordingObserver& observer) {
  cpu::ThreadPool pool(1);
  Session session(model, pool);
  const auto lent = test::borrow(observer);
  std::vector<float> received = test::to_vector(session.step({.tokens = kObservedPrompt, .observer = lent})->logits);
  const int token = 407;
  const auto decoded = session.step({.tokens = {&token, 1}, .observer = lent})->logits;
  received.insert(received.end(), decoded.begin(), decoded.end());
  const auto forwarded =
      session.step({.tokens = std::vector<int>{261, 378}, .all_rows = true, .observer = lent})->logits;
  received.insert(received.end(), forwarded.begin(), forwarded.end());
  return received;
}

std::vector<float> distributed_observed(DistributedSession& session, const std::shared_ptr<StepObserver>& observer) {
  std::vector<float> received;
  // A braced list is evaluated left to right: prefill, decode, forward.
  const int token = 407;
  const std::vector<int> pair = {261, 378};
  for (auto step : {session.step({.tokens = kObservedPrompt, .observer = observer}),
                    session.step({.tokens = {&token, 1}, .observer = observer}),
                    session.step({.tokens = pair, .all_rows = true, .observer = observer})}) {
    EXPECT_TRUE(step) << step.error().message();
    if (step) received.insert(received.end(), step->logits.begin(), step->logits.end());
  }
  return received;
}

TEST(DistributedSession, ObserversOnEveryRankSeeWhatOneRankSees) {
  const Model model = test::load_stories_model();
  RecordingObserver expected;
  const auto expected_logits = single_rank_observed(model, expected);
  for (int ranks = 1; ranks <= 3; ++ranks) {
    auto session = make_session(model, ranks);
    ASSERT_TRUE(session);
    auto observer = std::make_shared<RecordingObserver>();
    const auto received = distributed_observed(*session, observer);
    ASSERT_EQ(observer->units.size(), expected.units.size()) << ranks << " ranks";
    for (std::size_t i = 0; i < expected.units.size(); ++i) {
      EXPECT_EQ(observer->units[i].unit, expected.units[i].unit);
      EXPECT_EQ(observer->units[i].first_position, expected.units[i].first_position);
      EXPECT_TRUE(test::bit_identical(observer->units[i].hidden, expected.units[i].hidden))
          << ranks << " ranks, record " << i;
    }
    EXPECT_TRUE(test::bit_identical(observer->logits, expected.logits)) << ranks << " ranks";
    EXPECT_TRUE(test::bit_identical(received, expected_logits)) << ranks << " ranks";
  }
}

TEST(DistributedSession, ASteeringObserverChangesWhatTheCallerReceives) {
  const Model model = test::load_stories_model();
  RecordingObserver expected;
  expected.hidden_scale = 0.5f;  // crosses every route scaled
  expected.raised_logit = 7;
  const auto expected_logits = single_rank_observed(model, expected);
  auto session = make_session(model, 3);
  auto steer = std::make_shared<RecordingObserver>();
  steer->hidden_scale = 0.5f;
  steer->raised_logit = 7;
  const auto received = distributed_observed(*session, steer);
  EXPECT_TRUE(test::bit_identical(received, expected_logits));
  const int token = 286;
  auto step = session->step({.tokens = {&token, 1}, .observer = steer});
  ASSERT_TRUE(step);
  EXPECT_EQ(step->logits[7], 1000.0f);
  EXPECT_EQ(argmax(step->logits), 7);
  EXPECT_NE(session->decode(286)->logits[7], 1000.0f) << "the observer was lent for its steps only";
}

// Fails after `unit`, by an error or an exception; or in on_logits.
class FailingObserver final : public StepObserver {
 public:
  enum class How { error, exception };
  FailingObserver(int unit, How how) : unit_(unit), how_(how) {}
  Status on_unit_output(int unit, int, std::span<float>, int) override { return unit == unit_ ? fail() : Status{}; }
  Status on_logits(int, std::span<float>, int) override { return unit_ < 0 ? fail() : Status{}; }

 private:
  Status fail() const {
    if (how_ == How::exception) throw std::runtime_error("observer exploded");
    return Error(ErrorCode::contract, "observer refuses");
  }
  int unit_;
  How how_;
};

TEST(DistributedSession, AFailingObserverAbortsTheStepOnEveryRank) {
  const Model model = test::load_stories_model();
  auto session = make_session(model, 3);  // units {0, 1}, {2, 3}, {4}
  ASSERT_TRUE(session->prefill(std::vector<int>{1, 403}));
  struct Case {
    int unit;
    FailingObserver::How how;
    std::string rank;
    std::string phase;
    std::string words;
  };
  const std::vector<Case> cases = {
      {2, FailingObserver::How::error, "rank 1", "BoundarySourceCompletion(1->2)",
       "unit observer failed after unit 2: observer refuses"},
      {3, FailingObserver::How::exception, "rank 1", "BoundarySourceCompletion(1->2)", "exception: observer exploded"},
      {4, FailingObserver::How::error, "rank 2", "Execution", "unit observer failed after unit 4"},
      {-1, FailingObserver::How::exception, "rank 2", "OutputObservation", "exception: observer exploded"},
  };
  for (const auto& c : cases) {
    const auto before = session->checkpoint();
    ASSERT_TRUE(before);
    const int token = 407;
    auto step = session->step({.tokens = {&token, 1}, .observer = std::make_shared<FailingObserver>(c.unit, c.how)});
    ASSERT_FALSE(step);
    EXPECT_EQ(step.error().code(), ErrorCode::mechanism) << step.error().message();
    EXPECT_EQ(step.error().phase(), c.phase);
    EXPECT_NE(step.error().message().find(c.rank), std::string::npos) << step.error().message();
    EXPECT_NE(step.error().message().find(c.words), std::string::npos) << step.error().message();
    EXPECT_EQ(session->position(), 2);
    const auto after = session->checkpoint();
    ASSERT_TRUE(after);
    EXPECT_EQ(after->rank_digests, before->rank_digests) << c.words;
  }
  // The session goes on as if the failed steps had never been tried.
  auto next = session->decode(407);
  ASSERT_TRUE(next) << next.error().message();
  const std::vector<int> prompt = {1, 403, 407};
  cpu::ThreadPool pool(1);
  Session one(model, pool);
  EXPECT_TRUE(test::bit_identical(next->logits, one.prefill(prompt)->logits));
}

// --- SamplingSynchronization -----------------------------------------------

TEST(DistributedSession, GenerationStepsSampleOnTheOutputOwnerAsOneRankWould) {
  const Model model = test::load_stories_model();
  const std::vector<int> stop_tokens = {1, 2};
  for (const SamplerOptions options :
       {SamplerOptions{0.0f, 0.9f, 0}, SamplerOptions{0.9f, 0.9f, 42}, SamplerOptions{1.0f, 1.0f, 7}}) {
    // One rank: sample the logits locally.
    Sampler local(options);
    cpu::ThreadPool pool(1);
    Session one(model, pool);
    auto step = one.prefill(std::vector<int>{1, 403});
    std::vector<SampledToken> expected = {sample_token(local, step->logits, stop_tokens)};
    for (int i = 0; i < 12; ++i) {
      step = one.decode(expected.back().token);
      expected.push_back(sample_token(local, step->logits, stop_tokens));
    }
    for (int ranks = 1; ranks <= 3; ++ranks) {
      auto session = make_session(model, ranks);
      Sampler remote(options);
      auto distributed = test::sample_prefill(*session, std::vector<int>{1, 403}, remote, stop_tokens);
      ASSERT_TRUE(distributed) << distributed.error().message();
      std::vector<SampledToken> sampled = {distributed->sampled};
      for (int i = 0; i < 12; ++i) {
        distributed = test::sample_decode(*session, sampled.back().token, remote, stop_tokens);
        ASSERT_TRUE(distributed) << distributed.error().message();
        sampled.push_back(distributed->sampled);
      }
      EXPECT_EQ(sampled, expected) << ranks << " ranks, temperature " << options.temperature;
      EXPECT_EQ(remote.rng_state(), local.rng_state()) << ranks << " ranks";
      // StateCheckpoint, two phases per route, Execution,
      // OutputObservation, OutputPublication, SamplingSynchronization,
      // MechanismCompletion, Commit.
      EXPECT_EQ(session->stats().phases_run, 13u * static_cast<std::uint64_t>(2 * (ranks - 1) + 7));
    }
  }
}

// Chained steps (docs/protocol.md): each decode step begins when the one
// before it commits. The picks, the sampler's stream and the ranks' state
// are those of steps asked for one by one; the step begun after the last
// one, which no one asks for, leaves nothing behind, whether the next call
// is another token or a look at the ranks' state.
TEST(DistributedSession, ChainedStepsGiveWhatStepsAskedOneByOneGiveAndAStepNotTakenLeavesNoTrace) {
  const Model model = test::load_stories_model();
  const std::vector<int> prompt = {1, 403};
  const std::vector<int> stop_tokens = {1, 2};
  constexpr int kSteps = 10;
  constexpr int kOtherToken = 500;
  // The picks of steps asked one by one, and the logits of another token after them.
  std::vector<SampledToken> expected;
  std::vector<std::string> expected_digests;
  std::uint64_t expected_rng = 0;
  {
    auto session = make_session(model, 3);
    Sampler sampler({0.9f, 0.9f, 42});
    auto step = test::sample_prefill(*session, prompt, sampler, stop_tokens);
    ASSERT_TRUE(step) << step.error().message();
    expected.push_back(step->sampled);
    for (int i = 0; i < kSteps; ++i) {
      step = test::sample_decode(*session, expected.back().token, sampler, stop_tokens);
      ASSERT_TRUE(step) << step.error().message();
      expected.push_back(step->sampled);
    }
    expected_rng = sampler.rng_state();
    expected_digests = session->rank_digests().value();
  }
  std::vector<int> committed = prompt;
  for (std::size_t i = 0; i + 1 < expected.size(); ++i) committed.push_back(expected[i].token);
  committed.push_back(kOtherToken);
  cpu::ThreadPool pool(1);
  Session one(model, pool);
  const auto other_logits = one.prefill(committed)->logits;

  for (const bool then_another_token : {false, true}) {
    auto session = make_session(model, 3);
    Sampler sampler({0.9f, 0.9f, 42});
    auto step = test::sample_prefill(*session, prompt, sampler, stop_tokens);
    ASSERT_TRUE(step) << step.error().message();
    std::vector<SampledToken> sampled = {step->sampled};
    for (int i = 0; i < kSteps; ++i) {
      step = test::sample_decode(*session, sampled.back().token, sampler, stop_tokens, true, NextDecode::likely);
      ASSERT_TRUE(step) << step.error().message();
      sampled.push_back(step->sampled);
    }
    EXPECT_EQ(sampled, expected);
    EXPECT_EQ(sampler.rng_state(), expected_rng);
    EXPECT_EQ(session->position(), static_cast<int>(prompt.size()) + kSteps);
    if (then_another_token) {
      auto other = session->decode(kOtherToken);
      ASSERT_TRUE(other) << other.error().message();
      EXPECT_TRUE(test::bit_identical(other->logits, other_logits));
      // The prefill, the steps asked for, and the one begun and withdrawn.
      EXPECT_EQ(other->epoch, 1u + kSteps + 1u + 1u);
    } else {
      EXPECT_EQ(session->rank_digests().value(), expected_digests);
    }
    EXPECT_EQ(session->report().value().aborted_transactions, 0u)
        << "a withdrawn step is no transaction of the caller's";
  }
}

TEST(DistributedSession, AFailedGenerationStepLeavesTheSamplerAsItWas) {
  const Model model = test::load_stories_model();
  auto session = make_session(model, 2);
  Sampler sampler({0.9f, 0.9f, 5});
  const std::vector<int> stop_tokens = {1, 2};
  ASSERT_TRUE(test::sample_prefill(*session, std::vector<int>{1, 403}, sampler, stop_tokens));
  const std::uint64_t state = sampler.rng_state();
  EXPECT_FALSE(test::sample_decode(*session, 512, sampler, stop_tokens));
  EXPECT_EQ(sampler.rng_state(), state);
  Sampler bad({-1.0f, 0.9f, 5});
  auto refused = test::sample_decode(*session, 407, bad, stop_tokens);
  ASSERT_FALSE(refused);
  EXPECT_TRUE(refused.error().before_state_mutation());
  EXPECT_NE(refused.error().message().find("temperature"), std::string::npos);
  EXPECT_EQ(session->position(), 2);
  EXPECT_TRUE(test::sample_decode(*session, 407, sampler, stop_tokens));
  EXPECT_NE(sampler.rng_state(), state);
}

TEST(DistributedSession, AGenerationStepFlagsAStopToken) {
  const Model model = test::load_stories_model();
  const std::vector<int> prompt = {1, 403};
  const int greedy = argmax(single_rank_trace(model, prompt, 0));
  auto session = make_session(model, 3);
  Sampler sampler({0.0f, 0.9f, 0});
  auto step = test::sample_prefill(*session, prompt, sampler, std::vector<int>{2, greedy});
  ASSERT_TRUE(step) << step.error().message();
  EXPECT_EQ(step->sampled, (SampledToken{greedy, true}));
}

// A generator wants only the token: the output owner then keeps its
// logits, and the pick and the sampler's stream are those of a step that
// returned them.
TEST(DistributedSession, AGenerationStepCanLeaveItsLogitsOnTheOutputOwner) {
  const Model model = test::load_stories_model();
  const std::vector<int> prompt = {1, 403};
  const std::vector<int> stop_tokens = {1, 2};
  std::vector<DistributedStep> steps;
  std::vector<std::uint64_t> rng_states;
  for (const bool logits : {true, false}) {
    auto session = make_session(model, 3);
    Sampler sampler({0.9f, 0.9f, 11});
    ASSERT_TRUE(test::sample_prefill(*session, prompt, sampler, stop_tokens, logits));
    auto step = test::sample_decode(*session, 407, sampler, stop_tokens, logits);
    ASSERT_TRUE(step) << step.error().message();
    EXPECT_EQ(session->position(), 3);
    steps.push_back(std::move(*step));
    rng_states.push_back(sampler.rng_state());
  }
  EXPECT_EQ(steps[0].logits.size(), static_cast<std::size_t>(model.config().vocab_size));
  EXPECT_TRUE(steps[1].logits.empty());
  EXPECT_EQ(steps[1].rows, 0);
  EXPECT_EQ(steps[1].sampled, steps[0].sampled);
  EXPECT_EQ(rng_states[1], rng_states[0]);
}

TEST(DistributedSession, GenerateOnSeveralRanksGivesOneRanksTokens) {
  const Model model = test::load_stories_model();
  const Tokenizer tokenizer = test::load_stories_tokenizer();
  for (const SamplerOptions sampler : {SamplerOptions{0.0f, 0.9f, 0}, SamplerOptions{0.9f, 0.9f, 42}}) {
    GenerationOptions options;
    options.max_tokens = 40;
    options.sampler = sampler;
    cpu::ThreadPool pool(1);
    Session one(model, pool);
    auto expected = generate(one, tokenizer, "Once upon a time", options);
    ASSERT_TRUE(expected) << expected.error().message();
    for (int ranks = 1; ranks <= 3; ++ranks) {
      auto session = make_session(model, ranks);
      DistributedTarget target(*session, model);
      auto result = generate(target, tokenizer, "Once upon a time", options);
      ASSERT_TRUE(result) << result.error().message();
      EXPECT_EQ(result->generated_tokens, expected->generated_tokens) << ranks << " ranks";
      EXPECT_EQ(result->text, expected->text);
      EXPECT_EQ(result->stop_reason, expected->stop_reason);
    }
  }
}

// --- prediction-target capture ---------------------------------------------

TEST(DistributedSession, PredictionTargetStepsMatchOneRankBitForBit) {
  const Model model = test::load_stories_model();
  cpu::ThreadPool pool(1);
  Session one(model, pool);
  std::vector<std::vector<float>> logits, captures;
  for (auto step = one.step({.tokens = kObservedPrompt, .prediction_target = true}); step;) {
    logits.push_back(test::to_vector(step->logits));
    captures.push_back(test::to_vector(step->capture));
    if (logits.size() == 4) break;
    const int next = argmax(step->logits);
    step = one.step({.tokens = {&next, 1}, .prediction_target = true});
  }
  ASSERT_EQ(logits.size(), 4u);
  for (int ranks = 1; ranks <= 3; ++ranks) {
    auto session = make_session(model, ranks);
    auto step = session->step({.tokens = kObservedPrompt, .prediction_target = true});
    for (std::size_t i = 0; i < logits.size(); ++i) {
      ASSERT_TRUE(step) << step.error().message();
      EXPECT_TRUE(test::bit_identical(step->logits, logits[i])) << ranks << " ranks, step " << i;
      EXPECT_TRUE(test::bit_identical(step->prediction_target_capture, captures[i])) << ranks << " ranks, step " << i;
      if (i + 1 < logits.size()) {
        const int next = argmax(step->logits);
        step = session->step({.tokens = {&next, 1}, .prediction_target = true});
      }
    }
    // StateCheckpoint, two phases per route, Execution, OutputObservation,
    // PredictionTargetCapture, PredictionTargetCapturePublication,
    // PredictionTargetStatePreparation, PredictionExtensionExecution,
    // OutputPublication, MechanismCompletion, Commit.
    EXPECT_EQ(session->stats().phases_run, 4u * static_cast<std::uint64_t>(2 * (ranks - 1) + 10));
    EXPECT_TRUE(session->decode(5)->prediction_target_capture.empty()) << "plain steps capture nothing";
  }
}

}  // namespace
}  // namespace accord
