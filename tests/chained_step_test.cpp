// Chained steps in the transaction driver (TransactionRequest::chain_next,
// docs/protocol.md "Chained steps"): the commit of a sampled decode step
// begins the next one on the sampled token, that step commits only once its
// caller asks for it, and anything else the caller asks for withdraws it
// first, every rank restoring. No transport: the test plays the ranks.
#include <gtest/gtest.h>

#include "runtime/agreement/transaction_plan.hpp"
#include "runtime/engine/session_requests.hpp"
#include "runtime/engine/transaction_driver.hpp"

namespace accord {
namespace {

using enum DistributedExecutionPhase;

constexpr SessionId kSession = 9;
constexpr RankId kRanks = 2;

TransactionRequest sampled_decode(int token, std::uint64_t rng_state, bool chain_next) {
  ForwardStepRequest step;
  step.tokens = {token};
  step.sampling = SamplingArguments{0.9f, 0.9f, rng_state, {1, 2}};
  step.return_logits = false;
  step.chain_next = chain_next;
  return {step};
}

// Every rank reports every phase of `request` ok under `epoch`; the output
// owner sampled `token` (a stop token when `stop`).
void run_on_ranks(TransactionDriver& driver, const TransactionRequest& request, Epoch epoch, int token = 0,
                  std::uint64_t rng_state = 0, bool stop = false) {
  if (std::get<ForwardStepRequest>(request.operation).sampling)
    driver.collect(SamplingResult{kSession, epoch, token, stop, rng_state});
  for (const PhaseId& phase : phases_of(request, kRanks)) {
    for (RankId rank = 0; rank < kRanks; ++rank) driver.step(PhaseStatus{kSession, epoch, phase, rank, true, {}, {}});
  }
}

void acknowledge_abort(TransactionDriver& driver, Epoch epoch) {
  for (RankId rank = 0; rank < kRanks; ++rank) driver.step(AbortAcknowledgement{kSession, epoch, rank, true, {}});
}

// The begins among `messages`, one per rank.
std::vector<PhaseBegin> begins_in(const std::vector<CoordinatorMessage>& messages) {
  std::vector<PhaseBegin> begins;
  for (const auto& message : messages) {
    if (const auto* begin = std::get_if<PhaseBegin>(&message.message)) begins.push_back(*begin);
  }
  return begins;
}

std::vector<PhaseDecision> decisions_in(const std::vector<CoordinatorMessage>& messages, Decision kind) {
  std::vector<PhaseDecision> decisions;
  for (const auto& message : messages) {
    const auto* decision = std::get_if<PhaseDecision>(&message.message);
    if (decision != nullptr && decision->decision == kind) decisions.push_back(*decision);
  }
  return decisions;
}

// Starts a chaining step of token 5 and commits it on token 42: the
// chained step of 42 (epoch 2) is then begun, with no caller yet.
DriverReady commit_chaining_step(TransactionDriver& driver) {
  const TransactionRequest first = sampled_decode(5, 11, true);
  EXPECT_FALSE(driver.start(first));
  (void)driver.take_ready();
  run_on_ranks(driver, first, 1, 42, 77);
  return driver.take_ready();
}

TEST(ChainedStep, BeginsAtTheCommitOnTheSampledTokenAndCommitsOnlyWhenAskedFor) {
  TransactionDriver driver(kSession, kRanks);
  const DriverReady ready = commit_chaining_step(driver);
  ASSERT_TRUE(ready.reply);
  EXPECT_EQ(ready.reply->outcome, TransactionOutcome::committed) << ready.reply->message;
  EXPECT_EQ(ready.reply->sampled.token, 42);
  // Each rank hears the commit, then the next step's begin.
  EXPECT_EQ(decisions_in(ready.messages, Decision::commit).size(), kRanks);
  const auto begins = begins_in(ready.messages);
  ASSERT_EQ(begins.size(), kRanks);
  EXPECT_EQ(begins[0].epoch, 2u);
  EXPECT_EQ(begins[0].arguments, PhaseArguments{StepTokens{{42}}});
  EXPECT_EQ(begins[0].riders.back().phase, phase_id(Commit));
  bool samples_on = false;
  for (const Rider& rider : begins[0].riders) {
    if (const auto* sampling = std::get_if<SamplingArguments>(&rider.arguments)) {
      samples_on = sampling->rng_state == 77;
    }
  }
  EXPECT_TRUE(samples_on) << "the chained step samples from where the pick left the stream";
  EXPECT_FALSE(driver.busy()) << "a chained step no caller asked for does not make the session busy";

  // Every rank reports the chained step: its commit waits for the caller.
  const TransactionRequest asked = sampled_decode(42, 77, false);
  run_on_ranks(driver, asked, 2, 43, 78);
  DriverReady waiting = driver.take_ready();
  EXPECT_FALSE(waiting.reply);
  EXPECT_TRUE(decisions_in(waiting.messages, Decision::commit).empty());
  EXPECT_FALSE(driver.agreeing()) << "no deadline runs while the caller is away";

  ASSERT_FALSE(driver.start(asked));
  const DriverReady taken = driver.take_ready();
  ASSERT_TRUE(taken.reply);
  EXPECT_EQ(taken.reply->outcome, TransactionOutcome::committed);
  EXPECT_EQ(taken.reply->epoch, 2u);
  EXPECT_EQ(taken.reply->sampled.token, 43);
  EXPECT_EQ(decisions_in(taken.messages, Decision::commit).size(), kRanks);
  EXPECT_TRUE(begins_in(taken.messages).empty()) << "the caller asked for no chain after it";
}

TEST(ChainedStep, AStopTokenChainsNothing) {
  TransactionDriver driver(kSession, kRanks);
  const TransactionRequest first = sampled_decode(5, 11, true);
  ASSERT_FALSE(driver.start(first));
  (void)driver.take_ready();
  run_on_ranks(driver, first, 1, 2, 12, true);
  const DriverReady ready = driver.take_ready();
  ASSERT_TRUE(ready.reply);
  EXPECT_TRUE(ready.reply->sampled.stop);
  EXPECT_TRUE(begins_in(ready.messages).empty());
}

TEST(ChainedStep, ARequestForAnythingElseWithdrawsItAndEveryRankRestoresFirst) {
  TransactionDriver driver(kSession, kRanks);
  (void)commit_chaining_step(driver);
  // The caller decodes another token than the one sampled.
  const TransactionRequest other = sampled_decode(7, 77, false);
  ASSERT_FALSE(driver.start(other));
  DriverReady ready = driver.take_ready();
  const auto aborts = decisions_in(ready.messages, Decision::abort);
  ASSERT_EQ(aborts.size(), kRanks);
  EXPECT_EQ(aborts[0].epoch, 2u);
  EXPECT_EQ(aborts[0].cause.kind, CauseKind::withdrawn);
  EXPECT_TRUE(begins_in(ready.messages).empty()) << "nothing begins before every rank restored";
  EXPECT_TRUE(driver.busy());

  acknowledge_abort(driver, 2);
  ready = driver.take_ready();
  EXPECT_FALSE(ready.reply) << "the withdrawn step's reply goes to no one";
  const auto begins = begins_in(ready.messages);
  ASSERT_EQ(begins.size(), kRanks);
  EXPECT_EQ(begins[0].epoch, 3u);
  EXPECT_EQ(begins[0].arguments, PhaseArguments{StepTokens{{7}}});

  run_on_ranks(driver, other, 3, 8, 78);
  ready = driver.take_ready();
  ASSERT_TRUE(ready.reply);
  EXPECT_EQ(ready.reply->outcome, TransactionOutcome::committed);
  EXPECT_EQ(ready.reply->epoch, 3u);
}

TEST(ChainedStep, OneThatFailsBeforeItsCallerComesKeepsItsAbortForThatCaller) {
  TransactionDriver driver(kSession, kRanks);
  (void)commit_chaining_step(driver);
  driver.step(PhaseStatus{kSession, 2, phase_id(StateCheckpoint), 1, false, FailureCode::io, "disk gone"});
  acknowledge_abort(driver, 2);
  EXPECT_FALSE(driver.take_ready().reply);

  ASSERT_FALSE(driver.start(sampled_decode(42, 77, true)));
  const DriverReady ready = driver.take_ready();
  ASSERT_TRUE(ready.reply);
  EXPECT_EQ(ready.reply->outcome, TransactionOutcome::aborted);
  EXPECT_EQ(ready.reply->epoch, 2u);
  EXPECT_NE(ready.reply->message.find("disk gone"), std::string::npos) << ready.reply->message;
  EXPECT_TRUE(begins_in(ready.messages).empty()) << "an aborted step chains nothing";
}

TEST(ChainedStep, EndChainCommitsAtOnceWithNothingOpenAndOtherwiseUndoesTheStep) {
  TransactionDriver driver(kSession, kRanks);
  ASSERT_FALSE(driver.start({EndChainRequest{}}));
  DriverReady ready = driver.take_ready();
  ASSERT_TRUE(ready.reply);
  EXPECT_EQ(ready.reply->outcome, TransactionOutcome::committed);
  EXPECT_TRUE(ready.messages.empty());

  (void)commit_chaining_step(driver);
  ASSERT_FALSE(driver.start({EndChainRequest{}}));
  ready = driver.take_ready();
  EXPECT_FALSE(ready.reply);
  EXPECT_EQ(decisions_in(ready.messages, Decision::abort).size(), kRanks);
  acknowledge_abort(driver, 2);
  ready = driver.take_ready();
  ASSERT_TRUE(ready.reply);
  EXPECT_EQ(ready.reply->outcome, TransactionOutcome::committed);
  EXPECT_TRUE(ready.messages.empty());
  EXPECT_FALSE(driver.busy());
}

// A session's record counts what its caller ran: ending a chain is not a
// transaction, and leaves the newest committed epoch as it was.
TEST(ChainedStep, EndingAChainRecordsNoTransaction) {
  TransactionRecord record;
  record.committed(4);
  TransactionReply ended;
  ASSERT_TRUE(settle(record, TransactionKind::end_chain, ended));
  EXPECT_EQ(record.committed_epoch, 4u);
  EXPECT_EQ(record.last_epoch, 4u);
}

}  // namespace
}  // namespace accord
