// The agreement state machines (runtime/agreement; docs/protocol.md): every
// combination of rank replies for 1 to 4 ranks in every arrival order, every
// combination of abort acknowledgements, dropped traffic, poison and reset,
// and both machines wired together. No threads and no CAF: time is tick().
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/agreement/coordinator_agreement.hpp"
#include "runtime/agreement/rank_agreement.hpp"

namespace accord {
namespace {

using enum DistributedExecutionPhase;

constexpr SessionId kSession = 42;
constexpr AgreementOptions kOptions{.status_deadline_ticks = 3, .acknowledgement_deadline_ticks = 4};
const PhaseId kExecution = phase_id(Execution);
// Arguments a begin carries to its RunPhase unchanged.
const PhaseArguments kArguments = DraftTokens{7};

// ---------------------------------------------------------------------------
// Building blocks

enum class Reply { ok, error, silent };
enum class Acknowledgement { restored, failed, silent };

// Every assignment of one of `choices` to each of `ranks` ranks.
template <class T>
std::vector<std::vector<T>> every_assignment(RankId ranks, const std::vector<T>& choices) {
  std::vector<std::vector<T>> assignments{{}};
  for (RankId rank = 0; rank < ranks; ++rank) {
    std::vector<std::vector<T>> longer;
    for (const auto& prefix : assignments) {
      for (T choice : choices) {
        longer.push_back(prefix);
        longer.back().push_back(choice);
      }
    }
    assignments = std::move(longer);
  }
  return assignments;
}

// Ranks 0 … ranks-1.
std::vector<RankId> all_ranks(RankId ranks) {
  std::vector<RankId> all(ranks);
  std::iota(all.begin(), all.end(), RankId{0});
  return all;
}

// Every order in which `ranks` ranks can answer.
std::vector<std::vector<RankId>> every_order(RankId ranks) {
  std::vector<RankId> order = all_ranks(ranks);
  std::vector<std::vector<RankId>> orders;
  do {
    orders.push_back(order);
  } while (std::next_permutation(order.begin(), order.end()));
  return orders;
}

std::string failure_text(RankId rank) { return "boom on rank " + std::to_string(rank); }

PhaseStatus status(RankId rank, bool ok, Epoch epoch = 1, PhaseId phase = kExecution) {
  return {kSession, epoch, phase, rank, ok, FailureCode::mechanism, ok ? "" : failure_text(rank)};
}

AbortAcknowledgement acknowledgement(RankId rank, bool restored, Epoch epoch = 1) {
  return {kSession, epoch, rank, restored, restored ? "" : failure_text(rank)};
}

PhaseDecision decision(Decision kind, DecisionCause cause = {}, Epoch epoch = 1, PhaseId phase = kExecution) {
  return {kSession, epoch, phase, kind, std::move(cause)};
}

DecisionCause rank_error(RankId rank) {
  return {CauseKind::rank_error, rank, FailureCode::mechanism, failure_text(rank)};
}
DecisionCause restore_failed(RankId rank) {
  return {CauseKind::restore_failed, rank, FailureCode::state, failure_text(rank)};
}
// A cause that carries no words from the rank: a timeout or a rank down.
DecisionCause cause_of(CauseKind kind, RankId rank) { return {kind, rank, FailureCode::mechanism, {}}; }

// `messages` is `expected` sent once to each of `recipients`, in that order.
void expect_sent_to(const std::vector<CoordinatorMessage>& messages, const PhaseDecision& expected,
                    const std::vector<RankId>& recipients) {
  ASSERT_EQ(messages.size(), recipients.size());
  for (std::size_t i = 0; i < messages.size(); ++i) {
    EXPECT_EQ(messages[i].to, recipients[i]);
    EXPECT_EQ(messages[i].message, (RankInstruction{expected})) << describe(expected);
  }
}

void expect_begins(const CoordinatorReady& ready, RankId ranks, Epoch epoch, PhaseId phase) {
  ASSERT_EQ(ready.messages.size(), ranks);
  for (RankId rank = 0; rank < ranks; ++rank) {
    EXPECT_EQ(ready.messages[rank].to, rank);
    EXPECT_EQ(ready.messages[rank].message, (RankInstruction{PhaseBegin{kSession, epoch, phase, {}, {}}}));
  }
  EXPECT_TRUE(ready.settled.empty());
}

// Ticks until just before the deadline (nothing may happen), then once more.
void tick_through_deadline(CoordinatorAgreement& coordinator, std::uint32_t deadline) {
  for (std::uint32_t tick = 1; tick < deadline; ++tick) {
    coordinator.tick();
    const CoordinatorReady ready = coordinator.take_ready();
    ASSERT_TRUE(ready.messages.empty() && ready.settled.empty()) << "decided before the deadline, tick " << tick;
  }
  coordinator.tick();
}

template <class T>
std::string case_name(RankId ranks, const std::vector<T>& answers, const std::vector<RankId>& order) {
  std::string text = std::to_string(ranks) + " ranks, answers";
  for (T answer : answers) text.append(" ").append(std::to_string(static_cast<int>(answer)));
  text += ", order";
  for (RankId rank : order) text.append(" ").append(std::to_string(rank));
  return text;
}

// ---------------------------------------------------------------------------
// Statuses: every combination, every order

struct ExpectedOutcome {
  PhaseDecision decision;
  std::uint64_t late = 0;           // answers after the decision
  bool needs_the_deadline = false;  // decided by tick(), not by an answer
};

// The rules, written as plainly as possible: the first error to arrive
// aborts and later answers are late; otherwise a silent rank aborts at the
// deadline naming the lowest silent rank; otherwise all ok.
ExpectedOutcome expected_status_outcome(const std::vector<Reply>& replies, const std::vector<RankId>& order,
                                        PhasePosition position) {
  ExpectedOutcome expected{decision(position == PhasePosition::last ? Decision::commit : Decision::proceed)};
  bool decided = false;
  for (RankId rank : order) {
    if (replies[rank] == Reply::silent) continue;
    if (decided) {
      ++expected.late;
    } else if (replies[rank] == Reply::error) {
      expected.decision = decision(Decision::abort, rank_error(rank));
      decided = true;
    }
  }
  const auto silent = std::find(replies.begin(), replies.end(), Reply::silent);
  if (!decided && silent != replies.end()) {
    const auto rank = static_cast<RankId>(silent - replies.begin());
    expected.decision = decision(Decision::abort, cause_of(CauseKind::status_timeout, rank));
    expected.needs_the_deadline = true;
  }
  return expected;
}

void run_status_case(RankId ranks, const std::vector<Reply>& replies, const std::vector<RankId>& order,
                     PhasePosition position) {
  CoordinatorAgreement coordinator{kSession, ranks, kOptions};
  ASSERT_TRUE(coordinator.begin(1, kExecution, position).ok());
  expect_begins(coordinator.take_ready(), ranks, 1, kExecution);

  const ExpectedOutcome expected = expected_status_outcome(replies, order, position);
  for (RankId rank : order) {
    if (replies[rank] != Reply::silent) coordinator.step(status(rank, replies[rank] == Reply::ok));
  }
  if (expected.needs_the_deadline) {
    ASSERT_TRUE(coordinator.take_ready().messages.empty());
    tick_through_deadline(coordinator, kOptions.status_deadline_ticks);
  }
  CoordinatorReady ready = coordinator.take_ready();
  expect_sent_to(ready.messages, expected.decision, all_ranks(ranks));

  if (expected.decision.decision == Decision::abort) {
    // The abort settles only when every rank restored.
    EXPECT_TRUE(ready.settled.empty());
    EXPECT_TRUE(coordinator.agreeing());
    for (RankId rank = 0; rank < ranks; ++rank) coordinator.step(acknowledgement(rank, true));
    ready = coordinator.take_ready();
    EXPECT_TRUE(ready.messages.empty());
  }
  EXPECT_EQ(ready.settled, std::vector<PhaseDecision>{expected.decision});
  EXPECT_EQ(coordinator.dropped().of(DropReason::late), expected.late);
  EXPECT_EQ(coordinator.dropped().total(), expected.late);
  EXPECT_FALSE(coordinator.agreeing());
  EXPECT_FALSE(coordinator.poisoned());

  // The session goes on: the transaction's next phase after a proceed, a new
  // transaction after a commit or an abort.
  const bool open = expected.decision.decision == Decision::proceed;
  EXPECT_TRUE(coordinator.begin(open ? 1 : 2, phase_id(Commit), PhasePosition::last).ok());
}

TEST(CoordinatorAgreementTest, EveryStatusCombinationInEveryArrivalOrderDecidesByTheRules) {
  int cases = 0;
  for (RankId ranks = 1; ranks <= 4; ++ranks) {
    for (PhasePosition position : {PhasePosition::intermediate, PhasePosition::last}) {
      for (const auto& replies : every_assignment(ranks, std::vector<Reply>{Reply::ok, Reply::error, Reply::silent})) {
        for (const auto& order : every_order(ranks)) {
          SCOPED_TRACE(case_name(ranks, replies, order) + (position == PhasePosition::last ? ", last" : ""));
          run_status_case(ranks, replies, order, position);
          ++cases;
        }
      }
    }
  }
  // 2 positions x (3^1*1! + 3^2*2! + 3^3*3! + 3^4*4!)
  EXPECT_EQ(cases, 2 * (3 + 18 + 162 + 1944));
  RecordProperty("cases", cases);
}

// ---------------------------------------------------------------------------
// Abort acknowledgements: every combination, every order

// A failed restore poisons at once and later answers are late; otherwise a
// silent rank poisons at the deadline naming the lowest silent rank;
// otherwise the transaction is aborted and the session usable.
ExpectedOutcome expected_acknowledgement_outcome(const std::vector<Acknowledgement>& answers,
                                                 const std::vector<RankId>& order) {
  ExpectedOutcome expected{decision(Decision::abort, rank_error(0))};
  bool decided = false;
  for (RankId rank : order) {
    if (answers[rank] == Acknowledgement::silent) continue;
    if (decided) {
      ++expected.late;
    } else if (answers[rank] == Acknowledgement::failed) {
      expected.decision = decision(Decision::poison, restore_failed(rank));
      decided = true;
    }
  }
  const auto silent = std::find(answers.begin(), answers.end(), Acknowledgement::silent);
  if (!decided && silent != answers.end()) {
    const auto rank = static_cast<RankId>(silent - answers.begin());
    expected.decision = decision(Decision::poison, cause_of(CauseKind::acknowledgement_timeout, rank));
    expected.needs_the_deadline = true;
  }
  return expected;
}

void run_acknowledgement_case(RankId ranks, const std::vector<Acknowledgement>& answers,
                              const std::vector<RankId>& order) {
  CoordinatorAgreement coordinator{kSession, ranks, kOptions};
  ASSERT_TRUE(coordinator.begin(1, kExecution, PhasePosition::intermediate).ok());
  coordinator.take_ready();
  coordinator.step(status(0, false));
  expect_sent_to(coordinator.take_ready().messages, decision(Decision::abort, rank_error(0)), all_ranks(ranks));

  const ExpectedOutcome expected = expected_acknowledgement_outcome(answers, order);
  for (RankId rank : order) {
    if (answers[rank] != Acknowledgement::silent) {
      coordinator.step(acknowledgement(rank, answers[rank] == Acknowledgement::restored));
    }
  }
  if (expected.needs_the_deadline) tick_through_deadline(coordinator, kOptions.acknowledgement_deadline_ticks);
  const CoordinatorReady ready = coordinator.take_ready();
  EXPECT_EQ(ready.settled, std::vector<PhaseDecision>{expected.decision});
  EXPECT_EQ(coordinator.dropped().of(DropReason::late), expected.late);
  EXPECT_FALSE(coordinator.agreeing());

  const Status next = coordinator.begin(2, kExecution, PhasePosition::last);
  if (expected.decision.decision == Decision::abort) {
    EXPECT_TRUE(ready.messages.empty());
    EXPECT_FALSE(coordinator.poisoned());
    EXPECT_TRUE(next.ok());
    return;
  }
  expect_sent_to(ready.messages, expected.decision, all_ranks(ranks));
  ASSERT_TRUE(coordinator.poisoned());
  EXPECT_EQ(*coordinator.poison(), expected.decision);
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.error().code(), ErrorCode::commit_indeterminate);
  EXPECT_NE(next.error().message().find(describe(expected.decision)), std::string::npos) << next.error().message();
  EXPECT_TRUE(coordinator.take_ready().messages.empty());
}

TEST(CoordinatorAgreementTest, EveryAcknowledgementCombinationInEveryOrderAbortsOrPoisons) {
  int cases = 0;
  const std::vector<Acknowledgement> choices = {Acknowledgement::restored, Acknowledgement::failed,
                                                Acknowledgement::silent};
  for (RankId ranks = 1; ranks <= 4; ++ranks) {
    for (const auto& answers : every_assignment(ranks, choices)) {
      for (const auto& order : every_order(ranks)) {
        SCOPED_TRACE(case_name(ranks, answers, order));
        run_acknowledgement_case(ranks, answers, order);
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 3 + 18 + 162 + 1944);
  RecordProperty("cases", cases);
}

TEST(CoordinatorAgreementTest, PoisonMessagesNameTheRankAndThePhase) {
  CoordinatorAgreement coordinator{kSession, 3, kOptions};
  ASSERT_TRUE(coordinator.begin(4, boundary_phase_id(BoundarySourceReady, 1, 2), PhasePosition::intermediate).ok());
  coordinator.rank_down(2);
  const Status refused = coordinator.begin(5, kExecution, PhasePosition::last);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message(),
            "session poisoned: poison at BoundarySourceReady(1->2) of epoch 4: rank 2 is down");
}

// ---------------------------------------------------------------------------
// Dropped traffic

TEST(CoordinatorAgreementTest, ForeignStaleFutureDuplicateAndLateRepliesAreDroppedAndCounted) {
  CoordinatorAgreement coordinator{kSession, 2, kOptions};
  ASSERT_TRUE(coordinator.begin(5, kExecution, PhasePosition::intermediate).ok());
  coordinator.take_ready();

  PhaseStatus foreign = status(0, true, 5);
  foreign.session = kSession + 1;
  coordinator.step(foreign);
  coordinator.step(status(2, true, 5));   // no rank 2 in this topology
  coordinator.step(status(0, true, 4));   // stale
  coordinator.step(status(0, false, 6));  // future (an error would abort)
  coordinator.step(status(0, true, 5));
  coordinator.step(status(0, false, 5));                   // a second answer
  coordinator.step(status(1, true, 5, phase_id(Commit)));  // another phase
  coordinator.step(acknowledgement(1, true, 5));           // nothing was aborted
  EXPECT_TRUE(coordinator.take_ready().messages.empty()) << "a dropped reply decided";

  coordinator.step(status(1, true, 5));
  EXPECT_EQ(coordinator.take_ready().settled, std::vector<PhaseDecision>{decision(Decision::proceed, {}, 5)});
  coordinator.step(status(1, false, 5));  // after the decision

  const DroppedMessages& dropped = coordinator.dropped();
  EXPECT_EQ(dropped.of(DropReason::other_session), 1u);
  EXPECT_EQ(dropped.of(DropReason::unknown_rank), 1u);
  EXPECT_EQ(dropped.of(DropReason::stale_epoch), 1u);
  EXPECT_EQ(dropped.of(DropReason::future_epoch), 1u);
  EXPECT_EQ(dropped.of(DropReason::duplicate), 1u);
  EXPECT_EQ(dropped.of(DropReason::late), 3u);
  EXPECT_EQ(dropped.total(), 8u);

  coordinator.rank_down(1);
  coordinator.step(status(1, true, 5));
  EXPECT_EQ(dropped.of(DropReason::rank_down), 1u);
}

TEST(CoordinatorAgreementTest, DuplicateAcknowledgementsAndAcknowledgementsAfterTheAbortAreDropped) {
  CoordinatorAgreement coordinator{kSession, 2, kOptions};
  ASSERT_TRUE(coordinator.begin(1, kExecution, PhasePosition::intermediate).ok());
  coordinator.step(status(1, false));
  coordinator.step(acknowledgement(0, true));
  coordinator.step(acknowledgement(0, false));  // duplicate: must not poison
  coordinator.step(acknowledgement(1, true));
  coordinator.step(acknowledgement(1, true));  // after the abort settled
  EXPECT_FALSE(coordinator.poisoned());
  EXPECT_EQ(coordinator.take_ready().settled.back(), decision(Decision::abort, rank_error(1)));
  EXPECT_EQ(coordinator.dropped().of(DropReason::duplicate), 1u);
  EXPECT_EQ(coordinator.dropped().of(DropReason::late), 1u);
}

// ---------------------------------------------------------------------------
// Transactions, ranks going down, poison and reset

TEST(CoordinatorAgreementTest, APhaseContinuesItsTransactionAndEpochsOnlyGrow) {
  CoordinatorAgreement coordinator{kSession, 1, kOptions};
  ASSERT_TRUE(coordinator.begin(3, kExecution, PhasePosition::intermediate).ok());
  EXPECT_EQ(coordinator.begin(3, phase_id(Commit), PhasePosition::last).error().code(), ErrorCode::contract)
      << "began while a phase was being agreed on";
  coordinator.step(status(0, true, 3));
  EXPECT_EQ(coordinator.begin(4, kExecution, PhasePosition::last).error().code(), ErrorCode::contract)
      << "opened a transaction while another was open";
  ASSERT_TRUE(coordinator.begin(3, phase_id(Commit), PhasePosition::last).ok());
  coordinator.step(status(0, true, 3, phase_id(Commit)));
  EXPECT_EQ(coordinator.take_ready().settled.back(), decision(Decision::commit, {}, 3, phase_id(Commit)));
  EXPECT_EQ(coordinator.begin(3, kExecution, PhasePosition::last).error().code(), ErrorCode::contract)
      << "reused a committed epoch";
  EXPECT_EQ(coordinator.begin(2, kExecution, PhasePosition::last).error().code(), ErrorCode::contract);
  EXPECT_TRUE(coordinator.begin(4, kExecution, PhasePosition::last).ok());
}

TEST(CoordinatorAgreementTest, ARankGoingDownPoisonsInEveryStageAndOnlyReachableRanksHearIt) {
  struct Stage {
    const char* name;
    std::function<void(CoordinatorAgreement&)> reach;
  };
  const std::vector<Stage> stages = {
      {"idle between phases",
       [](CoordinatorAgreement& c) {
         for (RankId rank = 0; rank < 3; ++rank) c.step(status(rank, true));
       }},
      {"collecting statuses", [](CoordinatorAgreement& c) { c.step(status(0, true)); }},
      {"collecting acknowledgements",
       [](CoordinatorAgreement& c) {
         c.step(status(0, false));
         c.step(acknowledgement(1, true));
       }},
  };
  for (const Stage& stage : stages) {
    SCOPED_TRACE(stage.name);
    CoordinatorAgreement coordinator{kSession, 3, kOptions};
    ASSERT_TRUE(coordinator.begin(1, kExecution, PhasePosition::intermediate).ok());
    stage.reach(coordinator);
    coordinator.take_ready();
    coordinator.rank_down(1);
    const PhaseDecision poison = decision(Decision::poison, cause_of(CauseKind::rank_down, 1));
    const CoordinatorReady ready = coordinator.take_ready();
    expect_sent_to(ready.messages, poison, {0, 2});
    EXPECT_EQ(ready.settled, std::vector<PhaseDecision>{poison});
    coordinator.rank_down(1);
    coordinator.rank_down(0);  // already poisoned, nothing in flight: nothing to send
    EXPECT_TRUE(coordinator.take_ready().messages.empty());
    EXPECT_EQ(*coordinator.poison(), poison) << "the first cause stays";
  }
}

// Runs the reset transaction's phases; every rank answers the first with
// `first_phase_ok` and the rest with ok. Returns the last settled decision.
PhaseDecision run_reset(CoordinatorAgreement& coordinator, Epoch epoch, bool first_phase_ok) {
  const std::vector<std::pair<PhaseId, PhasePosition>> phases = {
      {phase_id(SessionResetPreparation), PhasePosition::intermediate},
      {phase_id(MechanismCompletion), PhasePosition::intermediate},
      {phase_id(Commit), PhasePosition::last}};
  PhaseDecision last;
  for (std::size_t i = 0; i < phases.size(); ++i) {
    const auto& [phase, position] = phases[i];
    const Status begun = i == 0 ? coordinator.begin_reset(epoch) : coordinator.begin(epoch, phase, position);
    EXPECT_TRUE(begun.ok()) << begun.error().message();
    for (RankId rank = 0; rank < coordinator.rank_count(); ++rank) {
      coordinator.step(status(rank, i > 0 || first_phase_ok, epoch, phase));
      coordinator.step(acknowledgement(rank, true, epoch));  // late unless it aborted
    }
    last = coordinator.take_ready().settled.back();
    if (last.decision != Decision::proceed) break;
  }
  return last;
}

TEST(CoordinatorAgreementTest, APoisonedSessionRefusesWorkUntilAResetCommitsOnEveryRank) {
  CoordinatorAgreement coordinator{kSession, 3, kOptions};
  ASSERT_TRUE(coordinator.begin(1, kExecution, PhasePosition::intermediate).ok());
  coordinator.rank_down(2);
  const PhaseDecision cause = *coordinator.poison();

  const Status refused = coordinator.begin(2, phase_id(StateCheckpoint), PhasePosition::intermediate);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code(), ErrorCode::commit_indeterminate);
  EXPECT_NE(refused.error().message().find("rank 2 is down"), std::string::npos);

  // A reset with a rank still down is refused and the session stays poisoned.
  coordinator.take_ready();
  const Status reset_refused = coordinator.begin_reset(2);
  ASSERT_FALSE(reset_refused.ok());
  EXPECT_EQ(reset_refused.error().code(), ErrorCode::state);
  EXPECT_EQ(reset_refused.error().message(), "cannot reset: rank 2 is down");
  EXPECT_TRUE(coordinator.take_ready().messages.empty());
  EXPECT_TRUE(coordinator.poisoned());

  coordinator.rank_up(2);
  // A reset whose preparation fails aborts and leaves the session poisoned.
  EXPECT_EQ(run_reset(coordinator, 2, false).decision, Decision::abort);
  EXPECT_EQ(*coordinator.poison(), cause);
  EXPECT_FALSE(coordinator.begin(3, kExecution, PhasePosition::last).ok());

  // Between the reset's phases the session is still poisoned.
  ASSERT_TRUE(coordinator.begin_reset(3).ok());
  for (RankId rank = 0; rank < 3; ++rank) coordinator.step(status(rank, true, 3, phase_id(SessionResetPreparation)));
  EXPECT_TRUE(coordinator.poisoned());
  EXPECT_EQ(coordinator.begin(4, kExecution, PhasePosition::last).error().code(), ErrorCode::commit_indeterminate);

  ASSERT_TRUE(coordinator.begin(3, phase_id(MechanismCompletion), PhasePosition::intermediate).ok());
  for (RankId rank = 0; rank < 3; ++rank) coordinator.step(status(rank, true, 3, phase_id(MechanismCompletion)));
  ASSERT_TRUE(coordinator.begin(3, phase_id(Commit), PhasePosition::last).ok());
  for (RankId rank = 0; rank < 3; ++rank) coordinator.step(status(rank, true, 3, phase_id(Commit)));
  EXPECT_EQ(coordinator.take_ready().settled.back(), decision(Decision::commit, {}, 3, phase_id(Commit)));
  EXPECT_FALSE(coordinator.poisoned());
  EXPECT_TRUE(coordinator.begin(4, kExecution, PhasePosition::last).ok());
}

TEST(CoordinatorAgreementTest, ARankGoingDownDuringAResetKeepsTheSessionPoisoned) {
  CoordinatorAgreement coordinator{kSession, 2, kOptions};
  coordinator.rank_down(0);
  const PhaseDecision cause = *coordinator.poison();
  coordinator.rank_up(0);
  ASSERT_TRUE(coordinator.begin_reset(1).ok());
  coordinator.step(status(0, true, 1, phase_id(SessionResetPreparation)));
  coordinator.take_ready();
  coordinator.rank_down(1);
  const CoordinatorReady ready = coordinator.take_ready();
  const PhaseDecision poison =
      decision(Decision::poison, cause_of(CauseKind::rank_down, 1), 1, phase_id(SessionResetPreparation));
  expect_sent_to(ready.messages, poison, {0});
  EXPECT_EQ(ready.settled, std::vector<PhaseDecision>{poison});
  EXPECT_EQ(*coordinator.poison(), cause);
  EXPECT_EQ(coordinator.begin_reset(2).error().message(), "cannot reset: rank 1 is down");
}

TEST(CoordinatorAgreementTest, AResetCommitsOnEveryRankAfterARestoreFailed) {
  CoordinatorAgreement coordinator{kSession, 2, kOptions};
  ASSERT_TRUE(coordinator.begin(1, kExecution, PhasePosition::intermediate).ok());
  coordinator.step(status(1, false));
  coordinator.step(acknowledgement(1, false));
  ASSERT_TRUE(coordinator.poisoned());
  EXPECT_EQ(run_reset(coordinator, 2, true).decision, Decision::commit);
  EXPECT_FALSE(coordinator.poisoned());
}

// ---------------------------------------------------------------------------
// Rounds: a phase and its riders (transaction_plan.hpp)

const PhaseId kPublication = phase_id(OutputPublication);
const PhaseId kCommit = phase_id(Commit);
const std::vector<Rider> kRiders{{kPublication, {}}, {kCommit, {}}};

// Two ranks in the round Execution + [OutputPublication, Commit], begun.
CoordinatorAgreement begun_round() {
  CoordinatorAgreement coordinator{kSession, 2, kOptions};
  EXPECT_TRUE(coordinator.begin(1, kExecution, PhasePosition::last, kArguments, kRiders).ok());
  const CoordinatorReady ready = coordinator.take_ready();
  EXPECT_EQ(ready.messages.size(), 2u);
  for (const auto& message : ready.messages) {
    EXPECT_EQ(message.message, (RankInstruction{PhaseBegin{kSession, 1, kExecution, kArguments, kRiders}}));
  }
  return coordinator;
}

// Both ranks acknowledge that they restored: `abort` settles, and the
// session stays usable.
void expect_abort_settles(CoordinatorAgreement& coordinator, const PhaseDecision& abort) {
  coordinator.step(acknowledgement(0, true));
  coordinator.step(acknowledgement(1, true));
  EXPECT_EQ(coordinator.take_ready().settled, std::vector<PhaseDecision>{abort});
  EXPECT_FALSE(coordinator.poisoned());
}

TEST(CoordinatorAgreementTest, ARoundDecidesEachPhaseInOrderWithStatusesThatCameEarly) {
  CoordinatorAgreement coordinator = begun_round();
  // Rank 1 runs ahead: its riders' statuses come before rank 0's first one.
  for (const PhaseId& phase : {kExecution, kPublication, kCommit}) coordinator.step(status(1, true, 1, phase));
  EXPECT_TRUE(coordinator.take_ready().settled.empty());

  coordinator.step(status(0, true, 1, kExecution));
  CoordinatorReady ready = coordinator.take_ready();
  EXPECT_EQ(ready.settled, std::vector<PhaseDecision>{decision(Decision::proceed, {}, 1, kExecution)});
  expect_sent_to(ready.messages, decision(Decision::proceed, {}, 1, kExecution), {0, 1});
  EXPECT_TRUE(coordinator.agreeing());

  coordinator.step(status(0, true, 1, kPublication));
  coordinator.step(status(0, true, 1, kCommit));
  ready = coordinator.take_ready();
  EXPECT_EQ(ready.settled, (std::vector<PhaseDecision>{decision(Decision::proceed, {}, 1, kPublication),
                                                       decision(Decision::commit, {}, 1, kCommit)}));
  EXPECT_EQ(ready.messages.size(), 4u);
  EXPECT_FALSE(coordinator.agreeing());
  EXPECT_EQ(coordinator.dropped().total(), 0u);
  EXPECT_TRUE(coordinator.begin(2, kExecution, PhasePosition::last).ok()) << "the transaction did not end";
}

TEST(CoordinatorAgreementTest, AnErrorFromARiderAbortsAtOnceNamingItAndLaterStatusesAreLate) {
  CoordinatorAgreement coordinator = begun_round();
  coordinator.step(status(1, true, 1, kExecution));
  coordinator.step(status(1, false, 1, kPublication));
  CoordinatorReady ready = coordinator.take_ready();
  const PhaseDecision abort = decision(Decision::abort, rank_error(1), 1, kPublication);
  expect_sent_to(ready.messages, abort, {0, 1});

  coordinator.step(status(0, true, 1, kExecution));
  EXPECT_EQ(coordinator.dropped().of(DropReason::late), 1u);
  expect_abort_settles(coordinator, abort);
}

TEST(CoordinatorAgreementTest, ARoundsDeadlineNamesThePhaseInTurnAndItsSilentRank) {
  CoordinatorAgreement coordinator = begun_round();
  for (const PhaseId& phase : {kExecution, kPublication, kCommit}) coordinator.step(status(0, true, 1, phase));
  coordinator.step(status(1, true, 1, kExecution));
  EXPECT_EQ(coordinator.take_ready().settled,
            std::vector<PhaseDecision>{decision(Decision::proceed, {}, 1, kExecution)});
  tick_through_deadline(coordinator, kOptions.status_deadline_ticks);
  expect_sent_to(coordinator.take_ready().messages,
                 decision(Decision::abort, cause_of(CauseKind::status_timeout, 1), 1, kPublication), {0, 1});
}

TEST(CoordinatorAgreementTest, ARidersDeadlineRunsFromTheDecisionOfThePhaseBeforeIt) {
  CoordinatorAgreement coordinator = begun_round();
  // Execution takes all but the last tick of its deadline...
  for (std::uint32_t tick = 1; tick < kOptions.status_deadline_ticks; ++tick) coordinator.tick();
  coordinator.step(status(0, true, 1, kExecution));
  coordinator.step(status(1, true, 1, kExecution));
  EXPECT_EQ(coordinator.take_ready().settled,
            std::vector<PhaseDecision>{decision(Decision::proceed, {}, 1, kExecution)});
  // ...and the publication still has a whole deadline of its own.
  tick_through_deadline(coordinator, kOptions.status_deadline_ticks);
  expect_sent_to(coordinator.take_ready().messages,
                 decision(Decision::abort, cause_of(CauseKind::status_timeout, 0), 1, kPublication), {0, 1});
}

TEST(CoordinatorAgreementTest, ADuplicateEarlyStatusIsDroppedAndCounted) {
  CoordinatorAgreement coordinator = begun_round();
  coordinator.step(status(1, true, 1, kPublication));
  coordinator.step(status(1, true, 1, kPublication));
  EXPECT_EQ(coordinator.dropped().of(DropReason::duplicate), 1u);
}

// ---------------------------------------------------------------------------
// A commit held for confirmation (a chained step, docs/protocol.md)

// Two ranks in the round Execution + [OutputPublication, Commit], begun
// with its commit held.
CoordinatorAgreement begun_held_round() {
  CoordinatorAgreement coordinator{kSession, 2, kOptions};
  EXPECT_TRUE(coordinator.begin(1, kExecution, PhasePosition::last_on_confirmation, kArguments, kRiders).ok());
  (void)coordinator.take_ready();
  return coordinator;
}

void report_whole_round(CoordinatorAgreement& coordinator) {
  for (const PhaseId& phase : {kExecution, kPublication, kCommit}) {
    for (RankId rank : {0u, 1u}) coordinator.step(status(rank, true, 1, phase));
  }
}

TEST(CoordinatorAgreementTest, AHeldCommitWaitsForTheConfirmationWithoutADeadline) {
  CoordinatorAgreement coordinator = begun_held_round();
  report_whole_round(coordinator);
  CoordinatorReady ready = coordinator.take_ready();
  EXPECT_EQ(ready.settled, (std::vector<PhaseDecision>{decision(Decision::proceed, {}, 1, kExecution),
                                                       decision(Decision::proceed, {}, 1, kPublication)}));
  EXPECT_FALSE(coordinator.agreeing()) << "a held commit waits for no rank";
  for (std::uint32_t tick = 0; tick < 3 * kOptions.status_deadline_ticks; ++tick) coordinator.tick();
  EXPECT_TRUE(coordinator.take_ready().messages.empty()) << "a held commit has no deadline";
  EXPECT_FALSE(coordinator.begin(2, kExecution, PhasePosition::last).ok()) << "the transaction is still open";

  coordinator.confirm();
  ready = coordinator.take_ready();
  EXPECT_EQ(ready.settled, std::vector<PhaseDecision>{decision(Decision::commit, {}, 1, kCommit)});
  expect_sent_to(ready.messages, decision(Decision::commit, {}, 1, kCommit), {0, 1});
  EXPECT_TRUE(coordinator.begin(2, kExecution, PhasePosition::last).ok()) << "the transaction did not end";
}

TEST(CoordinatorAgreementTest, AConfirmationBeforeTheStatusesCommitsOnTheLastOne) {
  CoordinatorAgreement coordinator = begun_held_round();
  coordinator.confirm();
  report_whole_round(coordinator);
  const CoordinatorReady ready = coordinator.take_ready();
  ASSERT_EQ(ready.settled.size(), 3u);
  EXPECT_EQ(ready.settled.back(), decision(Decision::commit, {}, 1, kCommit));
  // A second confirmation, and a withdrawal after the commit, change nothing.
  coordinator.confirm();
  coordinator.withdraw();
  EXPECT_TRUE(coordinator.take_ready().messages.empty());
}

TEST(CoordinatorAgreementTest, AWithdrawnStepAbortsAndEveryRankRestores) {
  for (const bool statuses_in : {false, true}) {
    CoordinatorAgreement coordinator = begun_held_round();
    if (statuses_in) report_whole_round(coordinator);
    (void)coordinator.take_ready();
    coordinator.withdraw();
    const PhaseDecision abort =
        decision(Decision::abort, cause_of(CauseKind::withdrawn, kNoRank), 1, statuses_in ? kCommit : kExecution);
    expect_sent_to(coordinator.take_ready().messages, abort, {0, 1});
    EXPECT_TRUE(coordinator.agreeing()) << "the acknowledgements have a deadline";
    coordinator.confirm();  // too late: the abort goes on
    expect_abort_settles(coordinator, abort);
  }
}

TEST(CoordinatorAgreementTest, ACommitThatIsNotHeldIgnoresConfirmationsAndWithdrawals) {
  CoordinatorAgreement coordinator = begun_round();
  coordinator.withdraw();
  EXPECT_TRUE(coordinator.take_ready().messages.empty());
  report_whole_round(coordinator);
  EXPECT_EQ(coordinator.take_ready().settled.back(), decision(Decision::commit, {}, 1, kCommit));
}

TEST(CoordinatorAgreementTest, TakingIntoOneBufferGivesOnlyWhatBecameReadySince) {
  CoordinatorAgreement coordinator(kSession, 2, kOptions);
  ASSERT_TRUE(coordinator.begin(1, kExecution, PhasePosition::last).ok());
  CoordinatorReady buffer;
  coordinator.take_ready(buffer);
  expect_begins(buffer, 2, 1, kExecution);
  coordinator.step(status(0, true));
  coordinator.step(status(1, true));
  coordinator.take_ready(buffer);
  EXPECT_EQ(buffer.settled, std::vector<PhaseDecision>{decision(Decision::commit)});
  expect_sent_to(buffer.messages, decision(Decision::commit), {0, 1});
  coordinator.take_ready(buffer);
  EXPECT_TRUE(buffer.messages.empty()) << "a take gave an earlier take's messages again";
  EXPECT_TRUE(buffer.settled.empty());
}

// ---------------------------------------------------------------------------
// The rank's machine

class RankAgreementTest : public ::testing::Test {
 protected:
  RankAgreement rank_{kSession, 1};

  PhaseBegin begin(Epoch epoch, PhaseId phase = kExecution) { return {kSession, epoch, phase, kArguments, {}}; }
  PhaseDecision decide(Decision kind, Epoch epoch = 1, PhaseId phase = kExecution) {
    return decision(kind, kind == Decision::proceed || kind == Decision::commit ? DecisionCause{} : rank_error(0),
                    epoch, phase);
  }
  RankReady ready() { return rank_.take_ready(); }
};

TEST_F(RankAgreementTest, RunsEachPhaseReportsItAndCommitsOnTheDecision) {
  rank_.step(begin(1));
  RankReady out = ready();
  EXPECT_EQ(out.actions, (std::vector<RankAction>{RunPhase{1, kExecution, kArguments}}));
  EXPECT_TRUE(out.messages.empty()) << "reported before the local work finished";

  rank_.phase_done(1, kExecution);
  EXPECT_EQ(ready().messages, std::vector<RankMessage>{status(1, true)});
  rank_.step(decide(Decision::proceed));
  EXPECT_TRUE(ready().actions.empty());
  EXPECT_FALSE(rank_.settled());

  rank_.step(begin(1, phase_id(Commit)));
  rank_.phase_done(1, phase_id(Commit));
  rank_.step(decide(Decision::commit, 1, phase_id(Commit)));
  out = ready();
  ASSERT_EQ(out.actions.size(), 2u);
  EXPECT_EQ(out.actions.back(), RankAction{CommitTransaction{1}});
  EXPECT_TRUE(rank_.settled());
  EXPECT_EQ(rank_.dropped().total(), 0u);
}

TEST_F(RankAgreementTest, TakingIntoOneBufferGivesOnlyWhatBecameReadySince) {
  RankReady buffer;
  rank_.step(begin(1));
  rank_.take_ready(buffer);
  EXPECT_EQ(buffer.actions, (std::vector<RankAction>{RunPhase{1, kExecution, kArguments}}));
  rank_.phase_done(1, kExecution);
  rank_.take_ready(buffer);
  EXPECT_EQ(buffer.messages, std::vector<RankMessage>{status(1, true)});
  EXPECT_TRUE(buffer.actions.empty()) << "the first take's RunPhase came again";
  rank_.take_ready(buffer);
  EXPECT_TRUE(buffer.messages.empty());
  EXPECT_TRUE(buffer.actions.empty());
}

TEST_F(RankAgreementTest, RunsARoundsRidersRightAfterItsPhaseAndTakesTheirDecisionsInOrder) {
  rank_.step(PhaseBegin{kSession, 1, kExecution, kArguments, kRiders});
  EXPECT_EQ(ready().actions, (std::vector<RankAction>{RunPhase{1, kExecution, kArguments}}));
  rank_.phase_done(1, kExecution);
  RankReady out = ready();
  EXPECT_EQ(out.messages, std::vector<RankMessage>{status(1, true)});
  EXPECT_EQ(out.actions, (std::vector<RankAction>{RunPhase{1, kPublication, {}}})) << "waited for the decision";

  rank_.step(decide(Decision::proceed));  // while the rider runs
  rank_.step(decide(Decision::commit, 1, kPublication));
  EXPECT_EQ(rank_.dropped().of(DropReason::out_of_order), 1u) << "a commit of a phase that is not the round's last";
  rank_.phase_done(1, kPublication);
  out = ready();
  EXPECT_EQ(out.messages, std::vector<RankMessage>{status(1, true, 1, kPublication)});
  EXPECT_EQ(out.actions, (std::vector<RankAction>{RunPhase{1, kCommit, {}}}));
  rank_.phase_done(1, kCommit);
  EXPECT_EQ(ready().messages, std::vector<RankMessage>{status(1, true, 1, kCommit)});

  rank_.step(decide(Decision::proceed));
  EXPECT_EQ(rank_.dropped().of(DropReason::duplicate), 1u);
  rank_.step(decide(Decision::proceed, 1, kPublication));
  rank_.step(decide(Decision::commit, 1, kCommit));
  EXPECT_EQ(ready().actions, std::vector<RankAction>{CommitTransaction{1}});
  EXPECT_TRUE(rank_.settled());
  EXPECT_EQ(rank_.dropped().total(), 2u);
}

TEST_F(RankAgreementTest, AFailedPhaseRunsNoneOfItsRiders) {
  rank_.step(PhaseBegin{kSession, 1, kExecution, kArguments, kRiders});
  ready();
  rank_.phase_failed(1, kExecution, FailureCode::mechanism, failure_text(1));
  RankReady out = ready();
  EXPECT_EQ(out.messages, std::vector<RankMessage>{status(1, false)});
  EXPECT_TRUE(out.actions.empty());
  rank_.step(decide(Decision::abort));
  EXPECT_EQ(ready().actions, std::vector<RankAction>{RestoreCheckpoint{1}});
}

TEST_F(RankAgreementTest, AnAbortNamingALaterPhaseOfTheRoundWaitsForTheRiderThatRuns) {
  rank_.step(PhaseBegin{kSession, 1, kExecution, kArguments, kRiders});
  rank_.phase_done(1, kExecution);
  ready();
  // Another rank failed the round's last phase while this one runs a rider.
  rank_.step(decide(Decision::abort, 1, kCommit));
  EXPECT_TRUE(ready().actions.empty()) << "restored under running work";
  rank_.phase_done(1, kPublication);
  RankReady out = ready();
  EXPECT_TRUE(out.messages.empty()) << "reported a phase after the abort";
  EXPECT_EQ(out.actions, std::vector<RankAction>{RestoreCheckpoint{1}});
  rank_.restored(1);
  EXPECT_EQ(ready().messages, std::vector<RankMessage>{acknowledgement(1, true)});
  EXPECT_EQ(rank_.dropped().total(), 0u);
}

TEST_F(RankAgreementTest, AProceedForARiderNotYetReportedIsOutOfOrder) {
  rank_.step(PhaseBegin{kSession, 1, kExecution, kArguments, kRiders});
  rank_.step(decide(Decision::proceed, 1, kPublication));
  EXPECT_EQ(rank_.dropped().of(DropReason::out_of_order), 1u);
}

TEST_F(RankAgreementTest, AFailedPhaseReportsTheErrorAndRestoresOnAbort) {
  rank_.step(begin(1));
  rank_.phase_failed(1, kExecution, FailureCode::mechanism, failure_text(1));
  EXPECT_EQ(ready().messages, std::vector<RankMessage>{status(1, false)});
  rank_.step(decide(Decision::abort));
  EXPECT_EQ(ready().actions, std::vector<RankAction>{RestoreCheckpoint{1}});
  rank_.restored(1);
  EXPECT_EQ(ready().messages, std::vector<RankMessage>{acknowledgement(1, true)});
  EXPECT_TRUE(rank_.settled());
  EXPECT_FALSE(rank_.poisoned());
}

TEST_F(RankAgreementTest, AnAbortDuringTheLocalWorkRestoresOnlyAfterItAndSendsNoStatus) {
  rank_.step(begin(1));
  ready();
  rank_.step(decide(Decision::abort));
  EXPECT_TRUE(ready().actions.empty()) << "restored under running work";
  rank_.phase_done(1, kExecution);
  RankReady out = ready();
  EXPECT_EQ(out.actions, std::vector<RankAction>{RestoreCheckpoint{1}});
  EXPECT_TRUE(out.messages.empty());
  rank_.restored(1);
  EXPECT_EQ(ready().messages, std::vector<RankMessage>{acknowledgement(1, true)});
}

TEST_F(RankAgreementTest, APoisonDuringTheLocalWorkForgetsOnlyAfterItAndAResetWaitsForIt) {
  rank_.step(begin(1));
  ready();
  const PhaseDecision poison = decide(Decision::poison);
  rank_.step(poison);
  EXPECT_TRUE(ready().actions.empty()) << "forgot the transaction under running work";
  EXPECT_TRUE(rank_.poisoned());

  rank_.step(begin(2, phase_id(SessionResetPreparation)));
  EXPECT_TRUE(ready().actions.empty()) << "began the reset under running work";

  rank_.phase_done(1, kExecution);
  const RankReady out = ready();
  EXPECT_TRUE(out.messages.empty()) << "a status for a poisoned transaction";
  EXPECT_EQ(out.actions, (std::vector<RankAction>{MarkPoisoned{poison},
                                                  RunPhase{2, phase_id(SessionResetPreparation), kArguments}}));
  EXPECT_EQ(rank_.dropped().of(DropReason::late), 1u);

  rank_.phase_done(2, phase_id(SessionResetPreparation));
  EXPECT_EQ(ready().messages, std::vector<RankMessage>{status(1, true, 2, phase_id(SessionResetPreparation))});
}

TEST_F(RankAgreementTest, AFailedRestoreIsAcknowledgedAndPoisonsTheRank) {
  rank_.step(begin(1));
  rank_.phase_failed(1, kExecution, FailureCode::io, "disk");
  rank_.step(decide(Decision::abort));
  ready();
  rank_.restore_failed(1, failure_text(1));
  const RankReady out = ready();
  EXPECT_EQ(out.messages, std::vector<RankMessage>{acknowledgement(1, false)});
  ASSERT_TRUE(rank_.poisoned());
  EXPECT_EQ(rank_.poison()->cause, restore_failed(1));
  EXPECT_EQ(out.actions, std::vector<RankAction>{MarkPoisoned{*rank_.poison()}});
}

TEST_F(RankAgreementTest, StaleFutureForeignDuplicateLateAndOutOfOrderMessagesAreDroppedAndCounted) {
  rank_.step(begin(5));
  ready();
  PhaseBegin foreign = begin(6);
  foreign.session = kSession + 1;
  rank_.step(foreign);
  rank_.step(begin(4));                                        // stale
  rank_.step(begin(5));                                        // duplicate
  rank_.step(begin(5, phase_id(Commit)));                      // out of order: Execution still runs
  rank_.step(decide(Decision::proceed, 5));                    // out of order: no status sent yet
  rank_.step(decide(Decision::commit, 6));                     // future
  rank_.step(decide(Decision::abort, 4));                      // stale
  rank_.step(decide(Decision::proceed, 5, phase_id(Commit)));  // late: another phase
  PhaseDecision malformed = decide(Decision::proceed, 5);
  malformed.decision = static_cast<Decision>(9);
  rank_.step(malformed);
  rank_.phase_done(5, phase_id(Commit));  // late: not the running phase
  EXPECT_TRUE(ready().actions.empty() && ready().messages.empty());

  rank_.phase_done(5, kExecution);
  rank_.step(decide(Decision::proceed, 5));
  rank_.step(decide(Decision::proceed, 5));  // duplicate
  rank_.restored(5);                         // late: nothing to restore

  const DroppedMessages& dropped = rank_.dropped();
  EXPECT_EQ(dropped.of(DropReason::other_session), 1u);
  EXPECT_EQ(dropped.of(DropReason::stale_epoch), 2u);
  EXPECT_EQ(dropped.of(DropReason::future_epoch), 1u);
  EXPECT_EQ(dropped.of(DropReason::duplicate), 2u);
  EXPECT_EQ(dropped.of(DropReason::out_of_order), 2u);
  EXPECT_EQ(dropped.of(DropReason::late), 3u);
  EXPECT_EQ(dropped.of(DropReason::malformed), 1u);
  EXPECT_EQ(dropped.total(), 12u);
}

TEST_F(RankAgreementTest, APoisonedRankRefusesWorkUntilAResetCommits) {
  rank_.step(begin(1));
  rank_.step(decision(Decision::poison, cause_of(CauseKind::rank_down, 2)));
  ASSERT_TRUE(rank_.poisoned());
  ready();
  rank_.phase_done(1, kExecution);  // the work in flight finishes: late
  EXPECT_EQ(ready().actions, std::vector<RankAction>{MarkPoisoned{*rank_.poison()}});

  rank_.step(begin(2));
  RankReady out = ready();
  EXPECT_TRUE(out.actions.empty()) << "a poisoned rank ran a phase";
  ASSERT_EQ(out.messages.size(), 1u);
  const auto& refusal = std::get<PhaseStatus>(out.messages[0]);
  EXPECT_FALSE(refusal.ok);
  EXPECT_EQ(refusal.error_code, FailureCode::state);
  EXPECT_NE(refusal.error_message.find("rank 2 is down"), std::string::npos) << refusal.error_message;
  rank_.step(decide(Decision::abort, 2));
  out = ready();
  EXPECT_TRUE(out.actions.empty());
  EXPECT_EQ(out.messages,
            (std::vector<RankMessage>{AbortAcknowledgement{kSession, 2, 1, false, "rank 1 is poisoned"}}));

  const PhaseId reset = phase_id(SessionResetPreparation);
  rank_.step(begin(3, reset));
  EXPECT_EQ(ready().actions, (std::vector<RankAction>{RunPhase{3, reset, kArguments}}));
  rank_.phase_done(3, reset);
  rank_.step(decide(Decision::proceed, 3, reset));
  rank_.step(begin(3, phase_id(Commit)));
  rank_.phase_done(3, phase_id(Commit));
  EXPECT_TRUE(rank_.poisoned()) << "cleared before the reset committed";
  rank_.step(decide(Decision::commit, 3, phase_id(Commit)));
  EXPECT_FALSE(rank_.poisoned());
  rank_.step(begin(4));
  EXPECT_EQ(ready().actions.back(), (RankAction{RunPhase{4, kExecution, kArguments}}));
}

TEST_F(RankAgreementTest, PoisonDuringAResetEndsItAndKeepsTheFirstCause) {
  const PhaseDecision first = decision(Decision::poison, cause_of(CauseKind::rank_down, 2));
  rank_.step(begin(1));
  rank_.step(first);
  const PhaseId reset = phase_id(SessionResetPreparation);
  rank_.step(begin(2, reset));
  ready();
  rank_.phase_done(1, kExecution);  // the poisoned epoch's work ends; the reset begins
  ready();
  const PhaseDecision second = decision(Decision::poison, cause_of(CauseKind::rank_down, 0), 2, reset);
  rank_.step(second);
  EXPECT_TRUE(ready().actions.empty()) << "forgot the reset under its running work";
  EXPECT_TRUE(rank_.settled());
  EXPECT_EQ(*rank_.poison(), first);
  rank_.phase_done(2, reset);  // the reset's work in flight: nothing awaits it
  const RankReady out = ready();
  EXPECT_TRUE(out.messages.empty());
  EXPECT_EQ(out.actions, std::vector<RankAction>{MarkPoisoned{first}});
  rank_.step(second);
  EXPECT_EQ(rank_.dropped().of(DropReason::late), 2u);
  EXPECT_EQ(rank_.dropped().of(DropReason::duplicate), 1u);
}

TEST_F(RankAgreementTest, ANewEpochBeforeThePreviousSettledPoisonsTheRank) {
  rank_.step(begin(1));
  rank_.phase_done(1, kExecution);
  ready();
  rank_.step(begin(2));  // the decision on epoch 1 never came
  const RankReady out = ready();
  ASSERT_TRUE(rank_.poisoned());
  EXPECT_EQ(rank_.poison()->epoch, 1u);
  EXPECT_NE(rank_.poison()->cause.message.find("epoch 1 was never settled"), std::string::npos);
  ASSERT_EQ(out.messages.size(), 1u);
  EXPECT_FALSE(std::get<PhaseStatus>(out.messages[0]).ok);
}

TEST_F(RankAgreementTest, AResetMayStartBeforeThePreviousEpochSettledOnceItsWorkStopped) {
  rank_.step(begin(1));
  ready();
  rank_.step(begin(2, phase_id(SessionResetPreparation)));
  EXPECT_TRUE(ready().actions.empty()) << "began the reset under running work";
  rank_.phase_done(1, kExecution);
  const RankReady out = ready();
  EXPECT_FALSE(rank_.poisoned());
  EXPECT_TRUE(out.messages.empty()) << "a status for the superseded epoch";
  EXPECT_EQ(out.actions, (std::vector<RankAction>{RunPhase{2, phase_id(SessionResetPreparation), kArguments}}));
}

TEST_F(RankAgreementTest, AnotherTransactionWhileTheWorkRunsPoisonsTheRankOnceItStopped) {
  rank_.step(begin(1));
  ready();
  rank_.step(begin(2));  // the decision on epoch 1 never came
  EXPECT_TRUE(ready().actions.empty());
  rank_.phase_done(1, kExecution);
  const RankReady out = ready();
  ASSERT_TRUE(rank_.poisoned());
  EXPECT_NE(rank_.poison()->cause.message.find("epoch 1 was never settled"), std::string::npos);
  ASSERT_EQ(out.messages.size(), 1u);
  EXPECT_FALSE(std::get<PhaseStatus>(out.messages[0]).ok);
}

// ---------------------------------------------------------------------------
// Both machines together

// A coordinator and its ranks, with messages delivered at once and each
// rank's local work finishing at once, failing where the plan says.
class LoopbackCluster {
 public:
  using FailurePlan = std::function<bool(RankId, const PhaseId&)>;

  LoopbackCluster(RankId ranks, FailurePlan fails) : coordinator_{kSession, ranks, kOptions}, fails_(std::move(fails)) {
    for (RankId rank = 0; rank < ranks; ++rank) ranks_.emplace_back(kSession, rank);
    actions_.resize(ranks);
  }

  // Runs `rounds` (each a phase, then its riders) as transaction `epoch`;
  // returns how it settled.
  PhaseDecision run_transaction(Epoch epoch, const std::vector<std::vector<DistributedExecutionPhase>>& rounds) {
    PhaseDecision last;
    for (std::size_t i = 0; i < rounds.size(); ++i) {
      const PhasePosition position = i + 1 == rounds.size() ? PhasePosition::last : PhasePosition::intermediate;
      std::vector<Rider> riders;
      for (std::size_t r = 1; r < rounds[i].size(); ++r) riders.push_back({phase_id(rounds[i][r]), {}});
      EXPECT_TRUE(coordinator_.begin(epoch, phase_id(rounds[i][0]), position, {}, riders).ok());
      deliver_until_quiet();
      last = settled_.back();
      if (last.decision != Decision::proceed) break;
    }
    if (last.decision == Decision::commit) {
      EXPECT_EQ(coordinator_.dropped().total(), 0u);
    }
    return last;
  }

  // What rank `rank` was asked to do, of kind T.
  template <class T>
  std::size_t count(RankId rank) const {
    return static_cast<std::size_t>(std::count_if(actions_[rank].begin(), actions_[rank].end(),
                                                  [](const RankAction& a) { return std::holds_alternative<T>(a); }));
  }

 private:
  void deliver_until_quiet() {
    for (bool moved = true; moved;) {
      moved = deliver_from_coordinator();
      for (RankId rank = 0; rank < ranks_.size(); ++rank) moved = deliver_from_rank(rank) || moved;
    }
  }

  bool deliver_from_coordinator() {
    CoordinatorReady out = coordinator_.take_ready();
    settled_.insert(settled_.end(), out.settled.begin(), out.settled.end());
    for (const CoordinatorMessage& m : out.messages) {
      std::visit([&](const auto& message) { ranks_[m.to].step(message); }, m.message);
    }
    return !out.messages.empty();
  }

  bool deliver_from_rank(RankId rank) {
    RankReady out = ranks_[rank].take_ready();
    for (const RankAction& action : out.actions) perform(rank, action);
    for (const RankMessage& message : out.messages) {
      std::visit([&](const auto& m) { coordinator_.step(m); }, message);
    }
    return !out.actions.empty() || !out.messages.empty();
  }

  void perform(RankId rank, const RankAction& action) {
    actions_[rank].push_back(action);
    if (const auto* run = std::get_if<RunPhase>(&action)) {
      if (fails_(rank, run->phase)) {
        ranks_[rank].phase_failed(run->epoch, run->phase, FailureCode::mechanism, failure_text(rank));
      } else {
        ranks_[rank].phase_done(run->epoch, run->phase);
      }
    } else if (const auto* restore = std::get_if<RestoreCheckpoint>(&action)) {
      ranks_[rank].restored(restore->epoch);
    }
  }

  CoordinatorAgreement coordinator_;
  std::vector<RankAgreement> ranks_;
  FailurePlan fails_;
  std::vector<std::vector<RankAction>> actions_;
  std::vector<PhaseDecision> settled_;
};

// docs/protocol.md: forward, prefill and decode, one phase per round and
// in the plan's rounds (runtime/agreement/transaction_plan.hpp).
const std::vector<DistributedExecutionPhase> kForwardPhases = {
    StateCheckpoint, Execution, OutputObservation, OutputPublication, MechanismCompletion, Commit};
const std::vector<std::vector<DistributedExecutionPhase>> kOnePhasePerRound = {
    {StateCheckpoint}, {Execution}, {OutputObservation}, {OutputPublication}, {MechanismCompletion}, {Commit}};
const std::vector<std::vector<DistributedExecutionPhase>> kPlannedRounds = {
    {StateCheckpoint}, {Execution, OutputObservation, OutputPublication, MechanismCompletion, Commit}};

TEST(LoopbackClusterTest, AForwardStepCommitsEverywhereOrAbortsAndRestoresEverywhere) {
  int cases = 0;
  for (const auto& rounds : {kOnePhasePerRound, kPlannedRounds}) {
    for (RankId ranks = 1; ranks <= 4; ++ranks) {
      for (RankId failing = 0; failing <= ranks; ++failing) {  // `ranks` means no rank fails
        for (DistributedExecutionPhase failing_phase : kForwardPhases) {
          SCOPED_TRACE(std::to_string(rounds.size()) + " rounds, " + std::to_string(ranks) + " ranks, rank " +
                       std::to_string(failing) + " fails " + to_string(failing_phase));
          LoopbackCluster cluster{ranks, [&](RankId rank, const PhaseId& phase) {
                                    return rank == failing && phase.phase == failing_phase;
                                  }};
          const PhaseDecision outcome = cluster.run_transaction(1, rounds);
          const bool fault = failing < ranks;
          EXPECT_EQ(outcome.decision, fault ? Decision::abort : Decision::commit);
          if (fault) {
            EXPECT_EQ(outcome.cause, rank_error(failing));
            EXPECT_EQ(outcome.phase, phase_id(failing_phase));
          }
          for (RankId rank = 0; rank < ranks; ++rank) {
            EXPECT_EQ(cluster.count<CommitTransaction>(rank), fault ? 0u : 1u);
            EXPECT_EQ(cluster.count<RestoreCheckpoint>(rank), fault ? 1u : 0u);
          }
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 2 * 6 * (2 + 3 + 4 + 5));
}

}  // namespace
}  // namespace accord
