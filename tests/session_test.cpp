// The single-rank transactional session: rollback exactness, aborted steps
// that leave no trace, observers, checkpoints that refuse to lie.
#include "runtime/session/session.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>

#include "runtime/fault/fault_plan.hpp"
#include "runtime/text/sampler.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

const std::vector<int> kPrompt = {1, 403, 407, 261, 378};  // "Once upon a time"

class SessionTest : public ::testing::Test {
 protected:
  Model model_ = test::load_stories_model();
  cpu::ThreadPool pool_{2};
  Session session_{model_, pool_};

  // Greedy decoding of `steps` tokens after the current state; returns the
  // logits of every step.
  std::vector<std::vector<float>> decode_greedy(std::vector<float> logits, int steps) {
    std::vector<std::vector<float>> all;
    for (int i = 0; i < steps; ++i) {
      auto step = session_.decode(argmax(logits));
      EXPECT_TRUE(step) << step.error().message();
      logits = test::to_vector(step->logits);
      all.push_back(logits);
    }
    return all;
  }
};

TEST_F(SessionTest, RollbackRestoresTheStateAndReplaysBitForBit) {
  auto prefill = session_.prefill(kPrompt);
  ASSERT_TRUE(prefill);
  auto first = decode_greedy(test::to_vector(prefill->logits), 4);
  auto checkpoint = session_.checkpoint();
  ASSERT_TRUE(checkpoint);
  const std::string digest_at_checkpoint = session_.state_digest();
  EXPECT_EQ(checkpoint->digest, digest_at_checkpoint);
  auto rest = decode_greedy(first.back(), 8);
  EXPECT_NE(session_.state_digest(), digest_at_checkpoint);

  ASSERT_TRUE(session_.rollback(*checkpoint));
  EXPECT_EQ(session_.state_digest(), digest_at_checkpoint);
  EXPECT_EQ(session_.position(), static_cast<int>(kPrompt.size()) + 4);
  auto again = decode_greedy(first.back(), 8);
  ASSERT_EQ(again.size(), rest.size());
  for (std::size_t i = 0; i < rest.size(); ++i) EXPECT_TRUE(test::bit_identical(again[i], rest[i])) << "step " << i;
  EXPECT_EQ(session_.successful_state_restoration_generation(), 1u);
}

TEST_F(SessionTest, EpochsOnlyGrow) {
  std::uint64_t last = 0;
  for (int token : kPrompt) {
    auto step = session_.decode(token);
    ASSERT_TRUE(step);
    EXPECT_GT(step->epoch, last);
    last = step->epoch;
  }
  session_.set_failure_hook(test::fail_every(Phase::Execution));
  auto failed = session_.decode(5);
  ASSERT_FALSE(failed);
  ASSERT_TRUE(failed.error().epoch());
  EXPECT_GT(*failed.error().epoch(), last);
  session_.set_failure_hook({});
  auto next = session_.decode(5);
  ASSERT_TRUE(next);
  EXPECT_GT(next->epoch, *failed.error().epoch());
}

TEST_F(SessionTest, AFailedStepLeavesNoTraceAndGenerationRecovers) {
  // The unfaulted run.
  auto prefill = session_.prefill(kPrompt);
  ASSERT_TRUE(prefill);
  std::vector<int> expected;
  std::vector<float> logits = test::to_vector(prefill->logits);
  for (int i = 0; i < 10; ++i) {
    expected.push_back(argmax(logits));
    logits = test::to_vector(session_.decode(expected.back())->logits);
  }

  for (Phase phase : {Phase::StateCheckpoint, Phase::Execution, Phase::OutputObservation, Phase::OutputPublication,
                      Phase::MechanismCompletion, Phase::Commit}) {
    ASSERT_TRUE(session_.reset());
    logits = test::to_vector(session_.prefill(kPrompt)->logits);
    std::vector<int> tokens;
    int faults = 0;
    for (int i = 0; i < 10; ++i) {
      tokens.push_back(argmax(logits));
      if (i == 3) {
        const std::string digest = session_.state_digest();
        const auto report = session_.report();
        session_.set_failure_hook(test::fail_once(phase, report.last_epoch + 1));
        auto failed = session_.decode(tokens.back());
        ASSERT_FALSE(failed) << to_string(phase);
        ++faults;
        EXPECT_EQ(failed.error().code(), phase == Phase::Commit ? ErrorCode::commit_aborted : ErrorCode::mechanism);
        EXPECT_EQ(failed.error().phase(), to_string(phase));
        EXPECT_EQ(failed.error().epoch(), report.last_epoch + 1);
        EXPECT_NE(failed.error().message().find("aborted"), std::string::npos);
        EXPECT_EQ(session_.state_digest(), digest) << to_string(phase);
        EXPECT_EQ(session_.report().last_outcome, "aborted");
      }
      auto step = session_.decode(tokens.back());
      ASSERT_TRUE(step) << step.error().message();
      logits = test::to_vector(step->logits);
    }
    EXPECT_EQ(faults, 1);
    EXPECT_EQ(tokens, expected) << "after a fault in " << to_string(phase);
    session_.set_failure_hook({});
  }
}

TEST_F(SessionTest, AbortRestoresTheOverwrittenRowsByteForByte) {
  // Rows past the position may still back a checkpoint: after rolling back
  // from c7 to c5, rows 5 and 6 hold what c7 needs. A failed step writes
  // row 5 again; its abort must put the old bytes back.
  ASSERT_TRUE(session_.prefill(kPrompt));
  auto c5 = session_.checkpoint();
  ASSERT_TRUE(session_.decode(10));
  ASSERT_TRUE(session_.decode(11));
  auto c7 = session_.checkpoint();
  const auto expected = test::to_vector(session_.decode(12)->logits);
  ASSERT_TRUE(session_.rollback(*c5));

  session_.set_failure_hook(test::fail_every(Phase::Commit));
  EXPECT_FALSE(session_.decode(99));  // wrote row 5, then failed at the last phase
  session_.set_failure_hook({});

  ASSERT_TRUE(session_.rollback(*c7)) << "the aborted step left row 5 marked as rewritten";
  EXPECT_EQ(session_.state_digest(), c7->digest);
  EXPECT_TRUE(test::bit_identical(test::to_vector(session_.decode(12)->logits), expected));
}

TEST_F(SessionTest, CheckpointsRefuseStatesTheyCannotProve) {
  ASSERT_TRUE(session_.prefill(kPrompt));
  auto early = session_.checkpoint();
  ASSERT_TRUE(session_.decode(20));
  ASSERT_TRUE(session_.decode(21));
  auto late = session_.checkpoint();
  ASSERT_TRUE(late);

  // Going back and forth over rows that were not rewritten works.
  ASSERT_TRUE(session_.rollback(*early));
  ASSERT_TRUE(session_.rollback(*late));
  EXPECT_EQ(session_.position(), static_cast<int>(kPrompt.size()) + 2);

  // Rewriting a row below `late` makes it unprovable.
  ASSERT_TRUE(session_.rollback(*early));
  ASSERT_TRUE(session_.decode(99));
  const std::string digest = session_.state_digest();
  Status refused = session_.rollback(*late);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), ErrorCode::state);
  EXPECT_NE(refused.error().message().find("overwritten"), std::string::npos);
  EXPECT_EQ(session_.state_digest(), digest);

  // A reset invalidates every earlier checkpoint.
  ASSERT_TRUE(session_.reset());
  EXPECT_EQ(session_.position(), 0);
  Status after_reset = session_.rollback(*early);
  ASSERT_FALSE(after_reset);
  EXPECT_NE(after_reset.error().message().find("reset"), std::string::npos);

  // A checkpoint of another session is refused.
  Session other(model_, pool_);
  auto foreign = other.checkpoint();
  ASSERT_TRUE(foreign);
  EXPECT_FALSE(session_.rollback(*foreign));
}

TEST_F(SessionTest, AFailedResetOrRollbackChangesNothing) {
  ASSERT_TRUE(session_.prefill(kPrompt));
  auto checkpoint = session_.checkpoint();
  ASSERT_TRUE(session_.decode(10));
  const std::string digest = session_.state_digest();
  session_.set_failure_hook(test::fail_every(Phase::Commit));
  auto reset = session_.reset();
  ASSERT_FALSE(reset);
  EXPECT_EQ(reset.error().code(), ErrorCode::commit_aborted);
  EXPECT_FALSE(session_.rollback(*checkpoint));
  session_.set_failure_hook({});
  EXPECT_EQ(session_.state_digest(), digest);
  EXPECT_EQ(session_.position(), 6);
  // The failed reset did not count: the checkpoint is still good.
  EXPECT_TRUE(session_.rollback(*checkpoint));
}

TEST_F(SessionTest, BadInputFailsBeforeStateMutation) {
  ASSERT_TRUE(session_.prefill(kPrompt));
  const std::string digest = session_.state_digest();
  auto bad = session_.decode(512);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), ErrorCode::contract);
  EXPECT_TRUE(bad.error().before_state_mutation());
  std::vector<int> too_long(600, 5);
  auto past = session_.prefill(too_long);
  ASSERT_FALSE(past);
  EXPECT_TRUE(past.error().before_state_mutation());
  EXPECT_EQ(session_.state_digest(), digest);
  EXPECT_TRUE(session_.decode(5));
}

class RecordingObserver : public StepObserver {
 public:
  Status on_unit_output(int unit, int first_position, std::span<float> hidden, int rows) override {
    units.push_back(unit);
    last_first_position = first_position;
    last_rows = rows;
    last_hidden_size = hidden.size();
    return {};
  }
  Status on_logits(int, std::span<float> logits, int rows) override {
    logit_rows = rows;
    logits[7] = 1000.0f;  // steer: token 7 wins
    return {};
  }
  std::vector<int> units;
  int last_first_position = -1, last_rows = 0, logit_rows = 0;
  std::size_t last_hidden_size = 0;
};

TEST_F(SessionTest, ObserversSeeEveryUnitAndMayReplaceTheLogits) {
  RecordingObserver observer;
  auto step = session_.step({.tokens = kPrompt, .observer = test::borrow(observer)});
  ASSERT_TRUE(step);
  EXPECT_EQ(observer.units, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(observer.last_first_position, 0);
  EXPECT_EQ(observer.last_rows, 5);
  EXPECT_EQ(observer.last_hidden_size, 5u * 64);
  EXPECT_EQ(observer.logit_rows, 1);
  EXPECT_EQ(argmax(step->logits), 7);
  auto all = session_.step({.tokens = std::vector<int>{7, 8}, .all_rows = true, .observer = test::borrow(observer)});
  ASSERT_TRUE(all);
  EXPECT_EQ(all->rows, 2);
  EXPECT_EQ(observer.logit_rows, 2);
  EXPECT_EQ(all->first_position, 5);
}

class SteeringObserver : public StepObserver {
 public:
  Status on_unit_output(int unit, int, std::span<float> hidden, int) override {
    if (unit == 1) {
      for (float& x : hidden) x *= 1.5f;
    }
    return {};
  }
};

TEST_F(SessionTest, AnInterventionChangesTheStateItWrites) {
  ASSERT_TRUE(session_.prefill(kPrompt));
  const auto checkpoint = session_.checkpoint();
  auto plain = test::to_vector(session_.decode(10)->logits);
  auto after_plain = test::to_vector(session_.decode(11)->logits);
  ASSERT_TRUE(session_.rollback(*checkpoint));
  SteeringObserver steer;
  const int token = 10;
  auto steered = test::to_vector(session_.step({.tokens = {&token, 1}, .observer = test::borrow(steer)})->logits);
  auto after_steered = test::to_vector(session_.decode(11)->logits);
  EXPECT_FALSE(test::bit_identical(plain, steered));
  // The next step reads the steered keys and values of units 2..4.
  EXPECT_FALSE(test::bit_identical(after_plain, after_steered));
}

class FailingObserver : public StepObserver {
 public:
  explicit FailingObserver(bool throw_it) : throw_(throw_it) {}
  Status on_unit_output(int unit, int, std::span<float> hidden, int) override {
    for (float& x : hidden) x = 0;  // vandalise before failing
    if (unit == 2) {
      if (throw_) throw std::runtime_error("observer exploded");
      return Error(ErrorCode::contract, "observer refuses");
    }
    return {};
  }
  bool throw_;
};

TEST_F(SessionTest, AFailingObserverAbortsTheStep) {
  ASSERT_TRUE(session_.prefill(kPrompt));
  const std::string digest = session_.state_digest();
  for (bool throw_it : {false, true}) {
    FailingObserver observer(throw_it);
    const int token = 10;
    auto step = session_.step({.tokens = {&token, 1}, .observer = test::borrow(observer)});
    ASSERT_FALSE(step);
    EXPECT_EQ(step.error().code(), ErrorCode::mechanism);
    EXPECT_EQ(step.error().phase(), "Execution");
    EXPECT_NE(step.error().message().find(throw_it ? "observer exploded" : "observer refuses"), std::string::npos);
    EXPECT_EQ(session_.state_digest(), digest);
  }
  EXPECT_TRUE(session_.decode(10));
}

TEST_F(SessionTest, ReportTellsPositionEpochsAndOutcome) {
  auto initial = session_.report();
  EXPECT_EQ(initial.position, 0);
  EXPECT_EQ(initial.last_outcome, "none");
  EXPECT_EQ(initial.context, 512);
  EXPECT_EQ(initial.weights_bytes, 1040128u) << "the weights, not the file with its header and RoPE tables";
  EXPECT_EQ(initial.weights_residency, "resident");
  ASSERT_EQ(initial.weight_shares.size(), 1u);
  EXPECT_EQ(initial.weight_shares[0].bytes, initial.weights_bytes);
  EXPECT_EQ(initial.weight_shares[0].bytes_by_type, initial.weights_bytes_by_type);
  EXPECT_EQ(initial.model_identity.size(), 32u);
  ASSERT_TRUE(session_.prefill(kPrompt));
  auto r = session_.report();
  EXPECT_EQ(r.position, 5);
  EXPECT_EQ(r.kv_bytes_used, 5u * 5 * 32 * 2 * 4);  // positions * layers * kv_dim * (k, v) * float
  EXPECT_EQ(r.kv_bytes_capacity, 512u * 5 * 32 * 2 * 4);
  EXPECT_EQ(r.last_outcome, "committed");
  EXPECT_EQ(r.committed_epoch, r.last_epoch);
  EXPECT_EQ(r.state_epoch, r.last_epoch);
  EXPECT_GT(r.weights_resident_bytes, 0u);
  session_.set_failure_hook(test::fail_once(Phase::Execution, r.last_epoch + 1));
  EXPECT_FALSE(session_.decode(3));
  auto aborted = session_.report();
  EXPECT_EQ(aborted.last_outcome, "aborted");
  EXPECT_NE(aborted.last_error.find("injected"), std::string::npos);
  EXPECT_EQ(aborted.committed_epoch, r.committed_epoch);
  EXPECT_EQ(aborted.aborted_transactions, 1u);
  EXPECT_EQ(aborted.restoration_generation, 1u);
  EXPECT_EQ(aborted.state_digest, r.state_digest);
  auto materialized = session_.materialization_report();
  EXPECT_EQ(materialized.high_water_position, 5);
  EXPECT_EQ(materialized.kv_materialized_bytes, r.kv_bytes_used);
}

// Keeps the residual stream after the last unit, as the head sees it.
class LastUnitObserver : public StepObserver {
 public:
  Status on_unit_output(int, int, std::span<float> hidden, int) override {
    last_unit_output = test::to_vector(hidden);
    return {};
  }
  std::vector<float> last_unit_output;  // (rows, dim)
};

TEST_F(SessionTest, PredictionTargetStepsCaptureTheFinalHiddenStateOfTheLastRow) {
  cpu::ThreadPool pool(1);
  Session observed(model_, pool);
  LastUnitObserver observer;
  const auto expected_logits =
      test::to_vector(observed.step({.tokens = kPrompt, .observer = test::borrow(observer)})->logits);
  const auto dim = static_cast<std::size_t>(model_.config().dim);

  auto step = session_.step({.tokens = kPrompt, .prediction_target = true});
  ASSERT_TRUE(step) << step.error().message();
  EXPECT_TRUE(test::bit_identical(step->logits, expected_logits));
  EXPECT_EQ(step->first_position, 4);
  EXPECT_TRUE(test::bit_identical(step->capture, std::span<const float>(observer.last_unit_output).last(dim)));

  const int token = 10, next = 11;
  auto decoded = session_.step({.tokens = {&token, 1}, .prediction_target = true});
  ASSERT_TRUE(decoded);
  ASSERT_TRUE(observed.step({.tokens = {&token, 1}, .observer = test::borrow(observer)}));
  EXPECT_EQ(decoded->capture.size(), dim);
  EXPECT_TRUE(test::bit_identical(decoded->capture, observer.last_unit_output));

  for (Phase phase : {Phase::PredictionTargetCapture, Phase::PredictionTargetCapturePublication,
                      Phase::PredictionTargetStatePreparation, Phase::PredictionExtensionExecution}) {
    const std::string digest = session_.state_digest();
    session_.set_failure_hook(test::fail_every(phase));
    auto failed = session_.step({.tokens = {&next, 1}, .prediction_target = true});
    ASSERT_FALSE(failed);
    EXPECT_EQ(failed.error().phase(), to_string(phase));
    EXPECT_EQ(session_.state_digest(), digest);
    EXPECT_TRUE(session_.decode(11)) << "plain steps do not run the capture phases";
    session_.set_failure_hook({});
  }
}

// Fault plans on one rank, without actors (runtime/engine/direct_engine.hpp):
// each kind aborts the step and leaves the state as it was; a dropped
// status and a delayed phase abort at the deadline, counted in ticks; an
// `exit` poisons until a reset starts the rank again.
TEST_F(SessionTest, FaultPlansWorkOnOneRankWithoutActors) {
  ASSERT_TRUE(session_.prefill(kPrompt));
  for (const char* text : {"0:Execution:error", "0:OutputObservation:throw", "0:OutputPublication:drop",
                           "0:StateCheckpoint:delay", "0:Commit:error"}) {
    const std::string digest = session_.state_digest();
    ASSERT_TRUE(session_.inject_faults({*parse_fault(text)}));
    auto failed = session_.decode(42);
    ASSERT_FALSE(failed) << text;
    EXPECT_NE(failed.error().code(), ErrorCode::commit_indeterminate) << text << ": " << failed.error().message();
    EXPECT_EQ(session_.state_digest(), digest) << text;
  }
  ASSERT_TRUE(session_.inject_faults({*parse_fault("0:Execution:exit")}));
  auto failed = session_.decode(42);
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code(), ErrorCode::commit_indeterminate);
  ASSERT_TRUE(failed.error().poison());
  EXPECT_EQ(failed.error().poison()->rank, 0u);
  EXPECT_FALSE(session_.decode(42)) << "a poisoned session refuses work";
  ASSERT_TRUE(session_.reset());
  EXPECT_EQ(session_.position(), 0);
  auto again = session_.prefill(kPrompt);
  ASSERT_TRUE(again) << again.error().message();
}

}  // namespace
}  // namespace accord
