// Speculative decoding: prediction-target steps that verify a draft on a
// lane (runtime/rank/prediction_target.hpp), on one rank and across
// ranks; the drafters; and generation with them, which must give exactly
// plain greedy decoding's tokens.
#include <gtest/gtest.h>

#include "actors/distributed_session.hpp"
#include "actors/distributed_target.hpp"
#include "runtime/generate/drafter.hpp"
#include "runtime/generate/generator.hpp"
#include "runtime/model/identity.hpp"
#include "runtime/rank/rank_worker.hpp"
#include "runtime/text/sampler.hpp"
#include "tests/reference.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

const std::vector<int> kPrompt = {1, 403, 407, 261};
constexpr int kWrong = 7;  // a token greedy decoding never picks after kPrompt

// Plain greedy decoding after kPrompt: greedy[i] is the i-th token, and
// logits[i] the logits it came from (logits[0]: the prefill's).
struct GreedyRun {
  std::vector<int> greedy;
  std::vector<std::vector<float>> logits;
};

GreedyRun greedy_run(const Model& model, int tokens) {
  cpu::ThreadPool pool(1);
  Session session(model, pool);
  GreedyRun run;
  auto step = session.prefill(kPrompt);
  for (int i = 0; i < tokens; ++i) {
    run.logits.push_back(test::to_vector(step->logits));
    run.greedy.push_back(argmax(step->logits));
    step = session.decode(run.greedy.back());
  }
  return run;
}

std::vector<int> concat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class SpeculativeStepTest : public ::testing::Test {
 protected:
  SpeculativeStepTest() { EXPECT_TRUE(session_.prefill(kPrompt)); }

  // `first` (greedy[0]) then a draft that follows greedy for `agreeing`
  // tokens and then goes wrong, `total` draft tokens in all.
  PredictionTargetInput draft_of(int agreeing, int total) const {
    PredictionTargetInput input{{run_.greedy[0]}, total};
    for (int i = 1; i <= total; ++i) input.tokens.push_back(i <= agreeing ? run_.greedy[i] : kWrong);
    return input;
  }

  const Model model_ = test::load_stories_model();
  const GreedyRun run_ = greedy_run(model_, 8);
  cpu::ThreadPool pool_{1};
  Session session_{model_, pool_};
};

TEST_F(SpeculativeStepTest, KeepsTheDraftPrefixGreedyWouldProduce) {
  for (int agreeing = 0; agreeing <= 4; ++agreeing) {
    Session session(model_, pool_);
    ASSERT_TRUE(session.prefill(kPrompt));
    auto step = test::speculate(session, draft_of(agreeing, 4));
    ASSERT_TRUE(step) << step.error().message();
    EXPECT_EQ(step->accepted, agreeing);
    EXPECT_EQ(step->next_token, run_.greedy[static_cast<std::size_t>(agreeing) + 1]);
    // The last kept row's logits are those plain decoding gives there, bit for bit.
    EXPECT_TRUE(test::bit_identical(step->logits, run_.logits[static_cast<std::size_t>(agreeing) + 1]));
    EXPECT_EQ(step->rows, 1);
    EXPECT_EQ(step->first_position, static_cast<int>(kPrompt.size()) + agreeing);
    EXPECT_EQ(step->capture.size(), static_cast<std::size_t>(model_.config().dim));
    EXPECT_EQ(session.position(), static_cast<int>(kPrompt.size()) + agreeing + 1);
    const std::vector<int> kept(run_.greedy.begin(), run_.greedy.begin() + agreeing + 1);
    EXPECT_TRUE(std::ranges::equal(session.tokens(), concat(kPrompt, kept)));
    // The state goes on as plain decoding's would.
    auto next = session.decode(step->next_token);
    ASSERT_TRUE(next);
    EXPECT_TRUE(test::bit_identical(next->logits, run_.logits[static_cast<std::size_t>(agreeing) + 2]));
  }
}

TEST_F(SpeculativeStepTest, TheCaptureIsTheLastKeptRowsFinalHiddenState) {
  auto speculative = test::speculate(session_, draft_of(2, 3));
  ASSERT_TRUE(speculative);
  // The same row, run as a plain prediction-target step.
  Session plain(model_, pool_);
  ASSERT_TRUE(plain.prefill(kPrompt));
  ASSERT_TRUE(plain.decode(run_.greedy[0]));
  ASSERT_TRUE(plain.decode(run_.greedy[1]));
  auto expected = test::speculate(plain, {{run_.greedy[2]}, 0});
  ASSERT_TRUE(expected);
  EXPECT_TRUE(test::bit_identical(speculative->capture, expected->capture));
  EXPECT_EQ(expected->next_token, speculative->next_token);
}

TEST_F(SpeculativeStepTest, PrefillVerifiesADraftAfterThePrompt) {
  Session session(model_, pool_);
  const PredictionTargetInput input{concat(kPrompt, {run_.greedy[0], run_.greedy[1], kWrong}), 3};
  auto step = test::speculate(session, input);
  ASSERT_TRUE(step) << step.error().message();
  EXPECT_EQ(step->accepted, 2);
  EXPECT_EQ(step->next_token, run_.greedy[2]);
  EXPECT_TRUE(test::bit_identical(step->logits, run_.logits[2]));
  EXPECT_EQ(session.position(), static_cast<int>(kPrompt.size()) + 2);
}

TEST_F(SpeculativeStepTest, AFailureInAnyPhaseLeavesTheStateAsItWas) {
  for (Phase phase :
       {Phase::StateCheckpoint, Phase::Execution, Phase::OutputObservation, Phase::PredictionTargetCapture,
        Phase::PredictionTargetCapturePublication, Phase::PredictionTargetStatePreparation,
        Phase::PredictionExtensionExecution, Phase::OutputPublication, Phase::MechanismCompletion, Phase::Commit}) {
    const std::string digest = session_.state_digest();
    session_.set_failure_hook(test::fail_every(phase));
    auto failed = test::speculate(session_, draft_of(2, 4));
    ASSERT_FALSE(failed);
    EXPECT_EQ(failed.error().phase(), to_string(phase));
    EXPECT_EQ(session_.state_digest(), digest) << to_string(phase);
    session_.set_failure_hook({});
  }
  auto step = test::speculate(session_, draft_of(2, 4));
  ASSERT_TRUE(step);
  EXPECT_EQ(step->accepted, 2);
  EXPECT_TRUE(test::bit_identical(step->logits, run_.logits[3]));
}

TEST_F(SpeculativeStepTest, BadInputsAreRefusedBeforeAnythingChanges) {
  const std::string digest = session_.state_digest();
  auto refused = [&](const PredictionTargetInput& input) {
    auto step = test::speculate(session_, input);
    EXPECT_FALSE(step);
    if (!step) {
      EXPECT_TRUE(step.error().before_state_mutation()) << step.error().message();
      EXPECT_EQ(step.error().code(), ErrorCode::contract) << step.error().message();
    }
    EXPECT_EQ(session_.state_digest(), digest);
  };
  refused({{5, 6}, 2});                                                                  // nothing before the draft
  refused({{5, 6}, -1});                                                                 // a negative draft
  refused({{5, 6, 512}, 2});                                                             // a token past the vocabulary
  refused({std::vector<int>(static_cast<std::size_t>(model_.config().seq_len), 5), 3});  // past the context
}

// The lane's rejected rows are put back as they were before the step, so
// memory past the position is what it was, byte for byte.
TEST(SpeculativeLane, RejectedRowsAreRolledBackBeforeTheCommit) {
  const Model model = test::load_stories_model();
  const GreedyRun run = greedy_run(model, 4);
  const auto partition = Partition::balanced(model.config().n_layers, 1).value();
  RankWorker worker(model, std::make_shared<cpu::ThreadPool>(1), partition, 0, model_identity(model));
  ASSERT_TRUE(worker.begin_step(1, kPrompt));
  ASSERT_TRUE(worker.run_units(OutputRows::last));
  worker.commit(1);
  const int position = worker.position();
  auto rows_past_position = [&] {
    std::vector<float> rows;
    worker.state().kv().view_rows(0, position, 4, [&](std::span<const float> keys, std::span<const float> values) {
      rows.assign(keys.begin(), keys.end());
      rows.insert(rows.end(), values.begin(), values.end());
    });
    return rows;
  };
  const auto before = rows_past_position();
  const std::vector<int> step = {run.greedy[0], run.greedy[1], kWrong, kWrong};
  ASSERT_TRUE(worker.begin_step(2, step));
  ASSERT_TRUE(worker.run_units(OutputRows::all));
  ASSERT_TRUE(worker.capture_prediction_target(3));
  EXPECT_EQ(worker.prediction_target_state()->kept_rows, 2);
  ASSERT_TRUE(worker.prepare_prediction_target_state(3));
  ASSERT_TRUE(worker.apply_prediction_target_operation());
  // The output is the last kept row's logits: those plain decoding gives after greedy[1].
  EXPECT_TRUE(test::bit_identical(worker.published_output().data, run.logits[2]));
  worker.commit(2);
  EXPECT_EQ(worker.position(), position + 2);
  const auto after = rows_past_position();
  const auto dim = static_cast<std::size_t>(worker.state().kv().kv_dim());
  // Rows 2 and 3 of the lane (keys, then values) are as they were.
  for (std::size_t half : {std::size_t{0}, 4 * dim}) {
    EXPECT_TRUE(test::bit_identical(std::span(after).subspan(half + 2 * dim, 2 * dim),
                                    std::span(before).subspan(half + 2 * dim, 2 * dim)));
    const auto kept_after = std::span(after).subspan(half, 2 * dim);
    EXPECT_FALSE(test::bit_identical(kept_after, std::span(before).subspan(half, 2 * dim)));
  }
}

TEST(SpeculativeLane, AVerdictTheLaneCannotHoldIsRefused) {
  PredictionTargetState verdict{5, 1, 0, {}};
  EXPECT_FALSE(check_lane_swap(verdict, 4, 3));  // more rows than the lane
  verdict = {1, 0, 0, {}};
  EXPECT_FALSE(check_lane_swap(verdict, 4, 2));  // drops a committed token
  verdict = {3, 1, 0, {}};
  EXPECT_FALSE(check_lane_swap(verdict, 4, 3));  // accepted disagrees with the rows kept
  verdict = {3, 2, 0, {}};
  EXPECT_TRUE(check_lane_swap(verdict, 4, 3));
}

// --- across ranks -------------------------------------------------------------

std::unique_ptr<DistributedSession> distributed(const Model& model, int ranks) {
  DistributedOptions options;
  options.ranks = ranks;
  auto session = DistributedSession::create(model, options);
  if (!session) {
    ADD_FAILURE() << session.error().message();
    return nullptr;
  }
  return std::move(*session);
}

TEST(DistributedSpeculation, RanksGiveOneRanksVerdictsBitForBit) {
  const Model model = test::load_stories_model();
  const GreedyRun run = greedy_run(model, 10);
  cpu::ThreadPool pool(1);
  for (int ranks = 1; ranks <= 3; ++ranks) {
    auto session = distributed(model, ranks);
    ASSERT_TRUE(session->prefill(kPrompt));
    Session one(model, pool);
    ASSERT_TRUE(one.prefill(kPrompt));
    // Three speculative steps: 2 of 3 accepted, all of 2, none of 2.
    int token = run.greedy[0];
    std::size_t at = 0;
    for (const auto& [agreeing, total] : std::vector<std::pair<int, int>>{{2, 3}, {2, 2}, {0, 2}}) {
      PredictionTargetInput input{{token}, total};
      for (int i = 1; i <= total; ++i) input.tokens.push_back(i <= agreeing ? run.greedy[at + i] : kWrong);
      auto expected = test::speculate(one, input);
      auto step = test::speculate(*session, input);
      ASSERT_TRUE(expected && step) << ranks << " ranks";
      EXPECT_EQ(step->accepted, agreeing);
      EXPECT_EQ(step->next_token, expected->next_token);
      EXPECT_EQ(step->next_token, run.greedy[at + static_cast<std::size_t>(agreeing) + 1]);
      EXPECT_TRUE(test::bit_identical(step->logits, expected->logits)) << ranks << " ranks";
      EXPECT_TRUE(test::bit_identical(step->prediction_target_capture, expected->capture)) << ranks << " ranks";
      at += static_cast<std::size_t>(agreeing) + 1;
      token = step->next_token;
    }
    EXPECT_EQ(session->position(), one.position());
    EXPECT_EQ(session->position(), static_cast<int>(kPrompt.size() + at));
  }
}

TEST(DistributedSpeculation, FaultsInEveryPredictionPhaseLeaveEveryRankAsItWas) {
  const Model model = test::load_stories_model();
  const GreedyRun run = greedy_run(model, 4);
  const PredictionTargetInput input{{run.greedy[0], run.greedy[1], run.greedy[2], kWrong}, 3};
  auto session = distributed(model, 3);
  ASSERT_TRUE(session->prefill(kPrompt));
  const auto digests = session->rank_digests();
  ASSERT_TRUE(digests);
  // Short deadlines for the faulted steps only (a dropped status aborts at
  // the deadline); the steps that must succeed run on generous ones.
  ASSERT_TRUE(session->set_phase_timeout(200));
  for (const char* phase : {"PredictionTargetCapture", "PredictionTargetCapturePublication",
                            "PredictionTargetStatePreparation", "PredictionExtensionExecution"}) {
    for (int rank = 0; rank < 3; ++rank) {
      // The fault matrix walks every kind; these are the quick ones and a lost status.
      for (const char* kind : {"error", "throw", "drop"}) {
        const std::string fault = std::to_string(rank) + ":" + phase + ":" + kind;
        ASSERT_TRUE(session->inject_faults({parse_fault(fault).value()})) << fault;
        auto failed = test::speculate(*session, input);
        ASSERT_FALSE(failed) << fault << " did not fail";
        EXPECT_EQ(session->rank_digests().value(), *digests) << fault;
        EXPECT_EQ(session->position(), static_cast<int>(kPrompt.size())) << fault;
      }
    }
  }
  ASSERT_TRUE(session->inject_faults({}));
  ASSERT_TRUE(session->set_phase_timeout(5000));
  auto step = test::speculate(*session, input);
  ASSERT_TRUE(step) << step.error().message();
  EXPECT_EQ(step->accepted, 2);
  EXPECT_TRUE(test::bit_identical(step->logits, run.logits[3]));
}

TEST(DistributedSpeculation, RecoveryAfterAPoisonGivesBackTheCommittedState) {
  const Model model = test::load_stories_model();
  const GreedyRun run = greedy_run(model, 4);
  const PredictionTargetInput input{{run.greedy[0], run.greedy[1], kWrong}, 2};
  auto session = distributed(model, 3);
  ASSERT_TRUE(session->prefill(kPrompt));
  ASSERT_TRUE(session->inject_faults({parse_fault("1:PredictionTargetStatePreparation:exit").value()}));
  auto failed = test::speculate(*session, input);
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code(), ErrorCode::commit_indeterminate) << failed.error().message();
  auto healed = session->heal();
  ASSERT_TRUE(healed) << healed.error().message();
  EXPECT_TRUE(healed->healed);
  EXPECT_EQ(healed->replaced_ranks, 1);
  EXPECT_EQ(healed->replayed_tokens, static_cast<int>(kPrompt.size()));
  EXPECT_EQ(session->position(), static_cast<int>(kPrompt.size()));
  auto step = test::speculate(*session, input);
  ASSERT_TRUE(step) << step.error().message();
  EXPECT_EQ(step->accepted, 1);
  EXPECT_TRUE(test::bit_identical(step->logits, run.logits[2]));
  // A usable session has nothing to recover.
  auto untouched = session->heal();
  ASSERT_TRUE(untouched);
  EXPECT_FALSE(untouched->healed);
  EXPECT_EQ(session->position(), static_cast<int>(kPrompt.size()) + 2);
}

// --- drafters -------------------------------------------------------------------

TEST(PromptLookupDrafter, ProposesWhatFollowedTheLongestEarlierMatch) {
  PromptLookupDrafter drafter(3);
  // "1 2 3" occurred at the start; "2 3" alone last occurred later, before 4.
  const std::vector<int> context = {1, 2, 3, 9, 8, 2, 3, 4, 1, 2, 3};
  EXPECT_EQ(drafter.propose(context, 3).value(), (std::vector<int>{9, 8, 2}));
  EXPECT_EQ(drafter.propose(context, 1).value(), (std::vector<int>{9}));
  // Only the last token matches, at two places: the latest wins, and the
  // copy runs on past the context's end as the loop "5 7" would.
  EXPECT_EQ(drafter.propose(std::vector<int>{5, 6, 5, 7, 5}, 4).value(), (std::vector<int>{7, 5, 7, 5}));
  EXPECT_EQ(drafter.propose(std::vector<int>{3, 4, 4, 4}, 5).value(), (std::vector<int>(5, 4)));
  EXPECT_TRUE(drafter.propose(std::vector<int>{1, 2, 3}, 4).value().empty());
  EXPECT_TRUE(drafter.propose(std::vector<int>{1}, 4).value().empty());
}

TEST(ModelDrafter, ProposesItsOwnGreedyTokensAndFollowsTheContext) {
  const Model model = test::load_stories_model();
  const GreedyRun run = greedy_run(model, 9);
  ModelDrafter drafter(model, 1);
  const auto context = concat(kPrompt, {run.greedy[0]});
  EXPECT_EQ(drafter.propose(context, 4).value(), (std::vector<int>(run.greedy.begin() + 1, run.greedy.begin() + 5)));
  // The context grew by what a target accepted: it goes on from there.
  const auto longer = concat(context, {run.greedy[1], run.greedy[2]});
  EXPECT_EQ(drafter.propose(longer, 3).value(), (std::vector<int>(run.greedy.begin() + 3, run.greedy.begin() + 6)));
  // Another context altogether: it starts again.
  EXPECT_EQ(drafter.propose(context, 2).value(), (std::vector<int>(run.greedy.begin() + 1, run.greedy.begin() + 3)));
}

TEST(ModelDrafter, ADraftModelNeedsTheTargetsVocabulary) {
  ModelConfig draft = test::small_config();
  ModelConfig target = draft;
  target.vocab_size += 1;
  const Status refused = check_draft_model(draft, target);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("vocabulary"), std::string::npos);
  EXPECT_TRUE(check_draft_model(draft, draft));
}

// --- generation -----------------------------------------------------------------

GenerationOptions speculative_options(Drafter& drafter, int max_tokens) {
  GenerationOptions options;
  options.max_tokens = max_tokens;
  options.sampler.temperature = 0.0f;
  options.drafter = &drafter;
  options.draft_tokens = 4;
  return options;
}

// Generates every shared prompt with `drafter` on 1 and on 3 ranks and
// expects run.c's greedy tokens and text.
void expect_greedy_tokens_with(Drafter& drafter, const Model& model, const Tokenizer& tokenizer,
                               bool expect_acceptance) {
  cpu::ThreadPool pool(1);
  for (const auto& c : test::greedy_cases()) {
    const auto options = speculative_options(drafter, static_cast<int>(c.generated_tokens.size()));
    Session session(model, pool);
    auto one = generate(session, tokenizer, c.prompt, options);
    ASSERT_TRUE(one) << one.error().message();
    EXPECT_EQ(one->generated_tokens, c.generated_tokens) << c.prompt;
    EXPECT_EQ(one->text, c.text);
    EXPECT_LE(one->accepted_tokens, one->drafted_tokens);
    EXPECT_EQ(one->decoded_tokens(), static_cast<int>(c.generated_tokens.size()) - 1);
    if (expect_acceptance) {
      EXPECT_GT(one->accepted_tokens, 0) << c.prompt;
    }
    auto three = distributed(model, 3);
    DistributedTarget target(*three, model);
    auto distributed_result = generate(target, tokenizer, c.prompt, options);
    ASSERT_TRUE(distributed_result) << distributed_result.error().message();
    EXPECT_EQ(distributed_result->generated_tokens, c.generated_tokens) << c.prompt << " on 3 ranks";
    EXPECT_EQ(distributed_result->accepted_tokens, one->accepted_tokens);
    EXPECT_EQ(distributed_result->decode_steps, one->decode_steps);
  }
}

TEST(SpeculativeGeneration, PromptLookupGivesGreedysTokensOnOneAndThreeRanks) {
  const Model model = test::load_stories_model();
  PromptLookupDrafter drafter;
  expect_greedy_tokens_with(drafter, model, test::load_stories_tokenizer(), false);
}

TEST(SpeculativeGeneration, TheTargetAsItsOwnDraftAcceptsEveryToken) {
  const Model model = test::load_stories_model();
  ModelDrafter drafter(model, 1);
  expect_greedy_tokens_with(drafter, model, test::load_stories_tokenizer(), true);
  cpu::ThreadPool pool(1);
  Session session(model, pool);
  const auto c = test::greedy_cases().at(1);
  auto result = generate(session, test::load_stories_tokenizer(), c.prompt,
                         speculative_options(drafter, static_cast<int>(c.generated_tokens.size())));
  ASSERT_TRUE(result);
  EXPECT_EQ(result->acceptance_rate(), 1.0);
  // 4 draft tokens and greedy's own per step: 5 tokens a step.
  EXPECT_EQ(result->decode_steps, (result->decoded_tokens() + 4) / 5);
}

TEST(SpeculativeGeneration, AnUnrelatedDraftModelStillGivesGreedysTokens) {
  const test::TempDir dir;
  ModelConfig config = test::small_config();
  config.vocab_size = 512;
  config.seq_len = 512;
  const Model draft_model = test::synthetic_model(dir, {config, 11});
  const Model model = test::load_stories_model();
  ModelDrafter drafter(draft_model, 1);
  expect_greedy_tokens_with(drafter, model, test::load_stories_tokenizer(), false);
}

TEST(SpeculativeGeneration, GenerationGoesOnThroughFaultsInEveryPredictionPhase) {
  const Model model = test::load_stories_model();
  const Tokenizer tokenizer = test::load_stories_tokenizer();
  const auto c = test::greedy_cases().at(1);
  ModelDrafter drafter(model, 1);
  const auto options = speculative_options(drafter, static_cast<int>(c.generated_tokens.size()));
  for (const char* phase : {"PredictionTargetCapture", "PredictionTargetCapturePublication",
                            "PredictionTargetStatePreparation", "PredictionExtensionExecution"}) {
    for (const char* kind : {"error", "exit"}) {
      DistributedOptions distributed_options;
      distributed_options.ranks = 3;
      distributed_options.faults = {parse_fault(std::string("2:") + phase + ":" + kind + ":3").value()};
      auto session = DistributedSession::create(model, distributed_options);
      ASSERT_TRUE(session);
      DistributedTarget target(**session, model);
      auto result = generate(target, tokenizer, c.prompt, options);
      ASSERT_TRUE(result) << phase << " " << kind << ": " << result.error().message();
      EXPECT_EQ(result->generated_tokens, c.generated_tokens) << phase << " " << kind;
      EXPECT_EQ(result->aborted_steps, 1) << phase << " " << kind;
      EXPECT_EQ(result->recoveries, std::string(kind) == "exit" ? 1 : 0) << phase << " " << kind;
    }
  }
}

TEST(SpeculativeGeneration, RefusesSamplingAndAnEmptyDraft) {
  const Model model = test::load_stories_model();
  const Tokenizer tokenizer = test::load_stories_tokenizer();
  cpu::ThreadPool pool(1);
  Session session(model, pool);
  PromptLookupDrafter drafter;
  auto options = speculative_options(drafter, 8);
  options.sampler.temperature = 0.8f;
  auto sampled = generate(session, tokenizer, "Once", options);
  ASSERT_FALSE(sampled);
  EXPECT_NE(sampled.error().message().find("temperature 0"), std::string::npos);
  options = speculative_options(drafter, 8);
  options.draft_tokens = 0;
  auto empty = generate(session, tokenizer, "Once", options);
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.error().message().find("draft tokens"), std::string::npos);
  EXPECT_EQ(session.position(), 0);
}

}  // namespace
}  // namespace accord
