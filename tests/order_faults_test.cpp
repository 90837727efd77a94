// Order faults — reordered, late, duplicated and missing messages — against
// the real coordinator actor, on CAF's deterministic scheduler. Threads
// would make these orders a matter of luck; with the "testing" scheduler
// policy every message delivery and every timer fires only when the test
// says so, so each order below is the order that happens.
//
// The coordinator (actors/coordinator.cpp) talks to scripted fake ranks:
// plain actors that record every PhaseBegin and PhaseDecision they get. The
// test plays the ranks' answers (statuses, acknowledgements, data) as those
// ranks, in the order it chooses, and checks the decisions, the caller's
// TransactionReply and the coordinator's dropped-message counters.
#include <gtest/gtest.h>
#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <numeric>
#include <ostream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "actors/atoms.hpp"
#include "actors/caf_session.hpp"
#include "actors/coordinator.hpp"
#include "actors/distributed_session.hpp"
#include "actors/rank_actors.hpp"
#include "messages/phase_arguments.hpp"
#include "messages/protocol.hpp"
#include "messages/session_api.hpp"
#include "runtime/agreement/dropped_messages.hpp"
#include "runtime/fault/fault_plan.hpp"
#include "runtime/model/identity.hpp"
#include "runtime/rank/partition.hpp"
#include "runtime/rank/rank_worker.hpp"
#include "tests/support.hpp"

namespace accord {

// Readable failures. In namespace accord, where gtest finds them by the
// argument's type; static, since no other test file prints these.
static void PrintTo(const PhaseId& phase, std::ostream* out) { *out << to_string(phase); }
static void PrintTo(const PhaseDecision& decision, std::ostream* out) { *out << describe(decision); }
static void PrintTo(const PhaseStatus& status, std::ostream* out) {
  *out << "status of rank " << status.rank << " on " << to_string(status.phase) << " of epoch " << status.epoch << ": "
       << (status.ok ? "ok" : to_string(status.error_code) + " " + status.error_message);
}

namespace {

using enum DistributedExecutionPhase;

constexpr SessionId kSession = 7;
// Short deadlines, different from each other, so a test that confuses them fails.
constexpr AgreementOptions kDeadlines{.status_deadline_ticks = 3, .acknowledgement_deadline_ticks = 4};

// An actor system whose every message and timer is driven by the test.
struct DeterministicConfig : caf::actor_system_config {
  DeterministicConfig() {
    register_distributed_session_types(*this);
    set("scheduler.policy", caf::atom("testing"));
    set("logger.file-verbosity", caf::atom("quiet"));
  }
};

struct DeterministicSystem {
  DeterministicConfig config;
  caf::actor_system system{config};
  caf::scheduler::test_coordinator& scheduler = dynamic_cast<caf::scheduler::test_coordinator&>(system.scheduler());

  // Runs every queued message, and what it sends, until nothing is left.
  // Timers do not fire here.
  void deliver() {
    while (scheduler.try_run_once()) {
    }
  }
};

// What a scripted rank received, in order.
struct RankLog {
  std::vector<PhaseBegin> begins;
  std::vector<PhaseDecision> decisions;
  std::size_t batches = 0;  // RankInstructions among them
  // Where a test watches the order of arrivals across actors: "data" for
  // each RouteTransfer this rank takes.
  std::shared_ptr<std::vector<std::string>> arrivals;

  void record(const PhaseBegin& begin) { begins.push_back(begin); }
  void record(const PhaseDecision& decision) { decisions.push_back(decision); }
};

caf::behavior scripted_rank(caf::event_based_actor* self, std::shared_ptr<RankLog> log) {
  // Data between ranks (activations, samples) is not what these tests
  // watch. It is taken, not left to the default handler: CAF's `drop`
  // answers the sender with an error, which ends a rank's actor.
  self->set_default_handler(caf::drop);
  return {
      [=](const PhaseBegin& begin) { log->record(begin); },
      [=](const PhaseDecision& decision) { log->record(decision); },
      [=](const RankInstructions& instructions) {
        ++log->batches;
        for (const auto& item : instructions.items) std::visit([&](const auto& m) { log->record(m); }, item);
      },
      [=](const RouteTransfer&) {
        if (log->arrivals) log->arrivals->push_back("data");
      },
      [](const SamplingResult&) {},
      [](const PredictionTargetHidden&) {},
  };
}

// What the caller got back.
struct CallerLog {
  std::vector<TransactionReply> replies;
  std::vector<std::uint64_t> dropped;
  RankStateReport state;
};

// Forwards a TransactionRequest, dropped_atom or rank_state_atom to
// `target` (a coordinator or a rank's actor) as a request and records the
// answer.
caf::behavior caller(caf::event_based_actor* self, caf::actor target, std::shared_ptr<CallerLog> log) {
  return {
      [=](const TransactionRequest& request) {
        self->request(target, caf::infinite, request).then([=](TransactionReply& reply) {
          log->replies.push_back(std::move(reply));
        });
      },
      [=](dropped_atom) {
        self->request(target, caf::infinite, dropped_atom::value).then([=](std::vector<std::uint64_t>& counts) {
          log->dropped = std::move(counts);
        });
      },
      [=](rank_state_atom) {
        self->request(target, caf::infinite, rank_state_atom::value).then([=](RankStateReport& state) {
          log->state = std::move(state);
        });
      },
      [=](deadline_atom, std::int32_t timeout_ms) {
        self->request(target, caf::infinite, deadline_atom::value, timeout_ms).then([](bool) {});
      },
  };
}

TransactionRequest forward_step() {
  ForwardStepRequest step;
  step.tokens = {1, 2, 3};
  return {step};
}

std::vector<RankId> ranks_in_order(RankId ranks) {
  std::vector<RankId> order(ranks);
  std::iota(order.begin(), order.end(), RankId{0});
  return order;
}

std::string failure_text(RankId rank) { return "boom on rank " + std::to_string(rank); }

// The real coordinator with `ranks` scripted ranks and a caller.
class ScriptedCluster {
 public:
  explicit ScriptedCluster(RankId ranks) {
    options_.agreement = kDeadlines;
    coordinator_ = spawn_coordinator(sys_.system, kSession, ranks, options_);
    RankTopology topology;
    for (RankId r = 0; r < ranks; ++r) {
      logs_.push_back(std::make_shared<RankLog>());
      ranks_.push_back(sys_.system.spawn(scripted_rank, logs_.back()));
      topology.ranks.push_back(caf::actor_cast<RankActor>(ranks_.back()));
    }
    caf::anon_send(coordinator_, std::move(topology));
    caller_ = sys_.system.spawn(caller, caf::actor_cast<caf::actor>(coordinator_), caller_log_);
    sys_.deliver();
  }

  ~ScriptedCluster() {
    // Every actor ends before the system waits for them.
    caf::anon_send_exit(caller_, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(coordinator_, caf::exit_reason::user_shutdown);
    for (const auto& rank : ranks_) caf::anon_send_exit(rank, caf::exit_reason::user_shutdown);
    sys_.deliver();
  }

  ScriptedCluster(const ScriptedCluster&) = delete;
  ScriptedCluster& operator=(const ScriptedCluster&) = delete;

  RankId rank_count() const { return static_cast<RankId>(ranks_.size()); }
  const RankLog& seen_by(RankId rank) const { return *logs_.at(rank); }
  const std::vector<TransactionReply>& replies() const { return caller_log_->replies; }
  caf::scheduler::test_coordinator& scheduler() { return sys_.scheduler; }

  void request(const TransactionRequest& request) {
    caf::anon_send(caller_, request);
    sys_.deliver();
  }

  // The phase and epoch being agreed on: in the newest round the ranks
  // began, the first phase not yet decided (runtime/agreement/
  // transaction_plan.hpp: a round's riders are decided in order). The
  // coordinator holds a proceed back until the round ends (actors/
  // coordinator.cpp), so a phase every rank answered ok counts as decided.
  PhaseId phase() const {
    const PhaseBegin& begin = newest_begin();
    std::vector<PhaseId> round{begin.phase};
    for (const Rider& rider : begin.riders) round.push_back(rider.phase);
    std::size_t decided = 0;
    for (const PhaseDecision& d : logs_.at(0)->decisions) {
      if (d.epoch == begin.epoch && decided < round.size() && d.phase == round[decided]) ++decided;
    }
    while (decided < round.size() && every_rank_answered_ok(begin.epoch, round[decided])) ++decided;
    return round[std::min(decided, round.size() - 1)];
  }
  Epoch epoch() const { return newest_begin().epoch; }

  PhaseStatus status(RankId rank, bool ok = true) const {
    return {kSession, epoch(), phase(), rank, ok, FailureCode::io, ok ? "" : failure_text(rank)};
  }
  AbortAcknowledgement acknowledgement(RankId rank, bool restored = true) const {
    return {kSession, epoch(), rank, restored, restored ? "" : failure_text(rank)};
  }

  // Delivers `message` to the coordinator as if rank `from` sent it.
  template <class Message>
  void send_as(RankId from, Message message) {
    if constexpr (std::is_same_v<Message, PhaseStatus>) {
      if (message.ok && message.rank == from) answered_ok_.push_back(message);
    }
    caf::send_as(ranks_.at(from), coordinator_, std::move(message));
    sys_.deliver();
  }

  void answer(RankId rank, bool ok = true) { send_as(rank, status(rank, ok)); }
  void acknowledge(RankId rank, bool restored = true) { send_as(rank, acknowledgement(rank, restored)); }

  // Every rank answers ok, in `order`.
  void answer_all(const std::vector<RankId>& order) {
    for (RankId rank : order) answer(rank);
  }
  void answer_all() { answer_all(ranks_in_order(rank_count())); }

  // Every phase before `target` is agreed with every rank ok.
  void agree_until(DistributedExecutionPhase target) {
    while (phase().phase != target) answer_all();
  }

  // Advances the clock by one coordinator tick, checking that nothing fires
  // a nanosecond earlier. Returns how many timers fired (1 while the
  // coordinator's timer runs). Every advance of the clock goes through here,
  // so the timer stays aligned to whole ticks.
  std::size_t tick() {
    const auto almost = options_.tick - std::chrono::nanoseconds(1);
    EXPECT_EQ(sys_.scheduler.advance_time(almost), 0u) << "a timer fired before a whole tick passed";
    const std::size_t fired = sys_.scheduler.advance_time(std::chrono::nanoseconds(1));
    sys_.deliver();
    return fired;
  }

  // The session's set_phase_timeout.
  void set_phase_timeout(std::int32_t timeout_ms) {
    caf::anon_send(caller_, deadline_atom::value, timeout_ms);
    sys_.deliver();
  }

  // Advances the clock by `by` and runs what the timers that fired sent.
  std::size_t advance(std::chrono::milliseconds by) {
    const std::size_t fired = sys_.scheduler.advance_time(by);
    sys_.deliver();
    return fired;
  }

  DroppedMessages dropped() {
    caf::anon_send(caller_, dropped_atom::value);
    sys_.deliver();
    return DroppedMessages::from_counts(caller_log_->dropped);
  }

 private:
  bool every_rank_answered_ok(Epoch epoch, const PhaseId& phase) const {
    std::vector<bool> answered(rank_count(), false);
    for (const PhaseStatus& status : answered_ok_) {
      if (status.session == kSession && status.epoch == epoch && status.phase == phase) answered.at(status.rank) = true;
    }
    return std::all_of(answered.begin(), answered.end(), [](bool ok) { return ok; });
  }

  const PhaseBegin& newest_begin() const {
    if (logs_.at(0)->begins.empty()) throw std::logic_error("no phase has begun");
    return logs_.at(0)->begins.back();
  }

  DeterministicSystem sys_;
  CoordinatorOptions options_;
  CoordinatorActor coordinator_;
  std::vector<caf::actor> ranks_;
  caf::actor caller_;
  std::vector<std::shared_ptr<RankLog>> logs_;
  std::shared_ptr<CallerLog> caller_log_ = std::make_shared<CallerLog>();
  std::vector<PhaseStatus> answered_ok_;  // every ok status a rank sent
};

PhaseDecision decision(Epoch epoch, PhaseId phase, Decision kind, DecisionCause cause = {}) {
  return {kSession, epoch, phase, kind, std::move(cause)};
}

DecisionCause rank_error(RankId rank) { return {CauseKind::rank_error, rank, FailureCode::io, failure_text(rank)}; }
DecisionCause status_timeout(RankId rank) { return {CauseKind::status_timeout, rank, FailureCode::mechanism, {}}; }
DecisionCause acknowledgement_timeout(RankId rank) {
  return {CauseKind::acknowledgement_timeout, rank, FailureCode::mechanism, {}};
}

// Every rank got exactly `expected` as decisions, in order.
void expect_every_rank_decided(const ScriptedCluster& cluster, const std::vector<PhaseDecision>& expected) {
  for (RankId r = 0; r < cluster.rank_count(); ++r) {
    EXPECT_EQ(cluster.seen_by(r).decisions, expected) << "rank " << r;
  }
}

std::size_t decisions_so_far(const ScriptedCluster& cluster) { return cluster.seen_by(0).decisions.size(); }

// The decisions rank 0 got for `phase` of `epoch`.
std::vector<PhaseDecision> decisions_of(const ScriptedCluster& cluster, Epoch epoch, const PhaseId& phase) {
  std::vector<PhaseDecision> found;
  for (const PhaseDecision& d : cluster.seen_by(0).decisions) {
    if (d.epoch == epoch && d.phase == phase) found.push_back(d);
  }
  return found;
}

// Every rank answers ok until the forward step's round ends: the
// coordinator sends the proceeds it held back with the commit.
void finish_round(ScriptedCluster& cluster) {
  cluster.agree_until(Commit);
  cluster.answer_all();
}

// Every counter zero except those named.
void expect_dropped(const DroppedMessages& dropped, std::vector<std::pair<DropReason, std::uint64_t>> expected) {
  std::uint64_t total = 0;
  for (const auto& [reason, count] : expected) {
    EXPECT_EQ(dropped.of(reason), count) << to_string(reason);
    total += count;
  }
  EXPECT_EQ(dropped.total(), total);
}

std::vector<std::vector<RankId>> every_order(RankId ranks) {
  std::vector<RankId> order = ranks_in_order(ranks);
  std::vector<std::vector<RankId>> orders;
  do {
    orders.push_back(order);
  } while (std::next_permutation(order.begin(), order.end()));
  return orders;
}

// "3Ranks" for a test run on 3 ranks.
std::string rank_count_name(const ::testing::TestParamInfo<RankId>& run) { return std::to_string(run.param) + "Ranks"; }

// ---------------------------------------------------------------------------
// The coordinator, for 1 to 4 ranks

class CoordinatorOrderTest : public ::testing::TestWithParam<RankId> {};

INSTANTIATE_TEST_SUITE_P(Ranks, CoordinatorOrderTest, ::testing::Values(1u, 2u, 3u, 4u), rank_count_name);

TEST_P(CoordinatorOrderTest, EveryArrivalOrderOfTheStatusesCommitsTheSameWay) {
  const RankId ranks = GetParam();
  const std::vector<PhaseId> plan = phases_of(forward_step(), ranks);
  std::vector<PhaseDecision> expected;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    expected.push_back(decision(1, plan[i], i + 1 == plan.size() ? Decision::commit : Decision::proceed));
  }
  for (const auto& order : every_order(ranks)) {
    SCOPED_TRACE(::testing::PrintToString(order));
    ScriptedCluster cluster(ranks);
    cluster.request(forward_step());
    for (const PhaseId& phase : plan) {
      ASSERT_EQ(cluster.phase(), phase);
      const std::size_t decided = decisions_so_far(cluster);
      for (std::size_t i = 0; i < order.size(); ++i) {
        // Nothing is decided until the last status is in.
        EXPECT_EQ(decisions_so_far(cluster), decided);
        cluster.answer(order[i]);
      }
    }
    expect_every_rank_decided(cluster, expected);
    ASSERT_EQ(cluster.replies().size(), 1u);
    EXPECT_EQ(cluster.replies()[0].outcome, TransactionOutcome::committed);
    EXPECT_EQ(cluster.replies()[0].phases_run, plan.size());
    expect_dropped(cluster.dropped(), {});
  }
}

TEST_P(CoordinatorOrderTest, TheProceedsOfARoundReachEachRankWithItsCommitInOneMessage) {
  const RankId ranks = GetParam();
  const std::vector<PhaseId> plan = phases_of(forward_step(), ranks);
  ScriptedCluster cluster(ranks);
  cluster.request(forward_step());
  for (std::size_t i = 0; i + 1 < plan.size(); ++i) cluster.answer_all();
  // Every phase but the last is decided, and no rank has been told yet:
  // it runs the riders without waiting for their decisions.
  EXPECT_EQ(decisions_so_far(cluster), 0u);
  cluster.answer_all();
  std::vector<PhaseDecision> expected;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    expected.push_back(decision(1, plan[i], i + 1 == plan.size() ? Decision::commit : Decision::proceed));
  }
  expect_every_rank_decided(cluster, expected);
  for (RankId r = 0; r < ranks; ++r) EXPECT_EQ(cluster.seen_by(r).batches, 1u) << "rank " << r;
}

TEST_P(CoordinatorOrderTest, AnAbortReachesEachRankAfterTheProceedsHeldBeforeIt) {
  const RankId ranks = GetParam();
  ScriptedCluster cluster(ranks);
  cluster.request(forward_step());
  const PhaseId first = cluster.phase();
  cluster.answer_all();
  const PhaseId second = cluster.phase();
  ASSERT_NE(second, first);
  cluster.answer(0, false);
  expect_every_rank_decided(
      cluster, {decision(1, first, Decision::proceed), decision(1, second, Decision::abort, rank_error(0))});
}

TEST_P(CoordinatorOrderTest, EveryArrivalOrderWithOneFailingRankAbortsNamingIt) {
  const RankId ranks = GetParam();
  for (RankId failing = 0; failing < ranks; ++failing) {
    for (const auto& order : every_order(ranks)) {
      SCOPED_TRACE("rank " + std::to_string(failing) + " fails; order " + ::testing::PrintToString(order));
      ScriptedCluster cluster(ranks);
      cluster.request(forward_step());
      const PhaseId phase = cluster.phase();
      for (RankId rank : order) cluster.answer(rank, rank != failing);
      expect_every_rank_decided(cluster, {decision(1, phase, Decision::abort, rank_error(failing))});
      // The abort settles for the caller only when every rank restored.
      for (RankId rank : order) {
        EXPECT_TRUE(cluster.replies().empty());
        cluster.acknowledge(rank);
      }
      ASSERT_EQ(cluster.replies().size(), 1u);
      EXPECT_EQ(cluster.replies()[0].outcome, TransactionOutcome::aborted);
      EXPECT_EQ(cluster.replies()[0].error_code, FailureCode::io);
      EXPECT_EQ(cluster.replies()[0].message, describe(decision(1, phase, Decision::abort, rank_error(failing))));
      // The statuses after the error arrived when nothing awaited them.
      const auto after_error = order.end() - std::find(order.begin(), order.end(), failing) - 1;
      expect_dropped(cluster.dropped(), {{DropReason::late, static_cast<std::uint64_t>(after_error)}});
    }
  }
}

TEST_P(CoordinatorOrderTest, ARankSilentUntilTheDeadlineAbortsOnTheDeadlineTickNotBefore) {
  const RankId ranks = GetParam();
  for (RankId silent = 0; silent < ranks; ++silent) {
    SCOPED_TRACE("rank " + std::to_string(silent) + " is silent");
    ScriptedCluster cluster(ranks);
    cluster.request(forward_step());
    const PhaseId phase = cluster.phase();
    for (RankId rank = 0; rank < ranks; ++rank) {
      if (rank != silent) cluster.answer(rank);
    }
    for (std::uint32_t t = 1; t < kDeadlines.status_deadline_ticks; ++t) {
      ASSERT_EQ(cluster.tick(), 1u) << "tick " << t;
      EXPECT_EQ(decisions_so_far(cluster), 0u) << "after tick " << t;
    }
    ASSERT_EQ(cluster.tick(), 1u);
    expect_every_rank_decided(cluster, {decision(1, phase, Decision::abort, status_timeout(silent))});
    // The silent rank's status after the abort is late; it changes nothing.
    cluster.answer(silent);
    for (RankId rank = 0; rank < ranks; ++rank) cluster.acknowledge(rank);
    ASSERT_EQ(cluster.replies().size(), 1u);
    EXPECT_EQ(cluster.replies()[0].outcome, TransactionOutcome::aborted);
    EXPECT_EQ(cluster.replies()[0].message, "abort at StateCheckpoint of epoch 1: rank " + std::to_string(silent) +
                                                " did not report within the deadline");
    expect_dropped(cluster.dropped(), {{DropReason::late, 1}});
  }
}

TEST_P(CoordinatorOrderTest, AnAcknowledgementMissingUntilItsDeadlinePoisonsOnTheDeadlineTick) {
  const RankId ranks = GetParam();
  const RankId silent = ranks - 1;
  ScriptedCluster cluster(ranks);
  cluster.request(forward_step());
  const PhaseId phase = cluster.phase();
  cluster.answer(0, false);
  for (RankId rank = 0; rank < silent; ++rank) cluster.acknowledge(rank);
  // The acknowledgement deadline counts from the abort, not from the begin.
  for (std::uint32_t t = 1; t < kDeadlines.acknowledgement_deadline_ticks; ++t) {
    ASSERT_EQ(cluster.tick(), 1u) << "tick " << t;
    EXPECT_EQ(decisions_so_far(cluster), 1u) << "after tick " << t;
  }
  ASSERT_EQ(cluster.tick(), 1u);
  expect_every_rank_decided(cluster, {decision(1, phase, Decision::abort, rank_error(0)),
                                      decision(1, phase, Decision::poison, acknowledgement_timeout(silent))});
  ASSERT_EQ(cluster.replies().size(), 1u);
  EXPECT_EQ(cluster.replies()[0].outcome, TransactionOutcome::poisoned);
}

TEST_P(CoordinatorOrderTest, TheTimerTicksOnlyWhileAPhaseIsBeingAgreedOn) {
  ScriptedCluster cluster(GetParam());
  EXPECT_FALSE(cluster.scheduler().has_pending_timeout());
  cluster.request(forward_step());
  EXPECT_TRUE(cluster.scheduler().has_pending_timeout());
  while (cluster.replies().empty()) cluster.answer_all();
  // The tick armed during the transaction fires once more and is not renewed.
  EXPECT_EQ(cluster.tick(), 1u);
  EXPECT_FALSE(cluster.scheduler().has_pending_timeout());
}

TEST(CoordinatorOptionsTest, APhaseTimeoutTicksATwentiethOfItselfAndNeverUnder5Milliseconds) {
  using std::chrono::milliseconds;
  for (const auto& [timeout, tick, ticks] :
       {std::tuple{5000, 250, 20u}, {2000, 100, 20u}, {100, 5, 20u}, {101, 5, 20u}, {7, 5, 1u}, {1, 5, 1u}}) {
    const auto options = CoordinatorOptions::for_phase_timeout(milliseconds(timeout));
    EXPECT_EQ(options.tick, milliseconds(tick)) << timeout << " ms";
    EXPECT_EQ(options.agreement.status_deadline_ticks, ticks) << timeout << " ms";
    EXPECT_EQ(options.agreement.acknowledgement_deadline_ticks, ticks) << timeout << " ms";
  }
}

// While a step is agreed the timer wakes the coordinator once a tick; a
// new phase timeout sets the tick and the deadline at once, and the periods
// that pass are counted in wall time, however late the tick comes.
TEST_P(CoordinatorOrderTest, ANewPhaseTimeoutSetsTheTickAndTheDeadline) {
  using std::chrono::milliseconds;
  ScriptedCluster cluster(GetParam());
  cluster.request(forward_step());
  cluster.set_phase_timeout(2000);  // 20 ticks of 100 ms
  const PhaseId phase = cluster.phase();
  EXPECT_EQ(cluster.advance(milliseconds(5)), 1u);  // the tick armed before: the first of the 20
  EXPECT_EQ(cluster.advance(milliseconds(99)), 0u);
  EXPECT_EQ(cluster.advance(milliseconds(1)), 1u);
  EXPECT_EQ(cluster.advance(milliseconds(1600)), 1u);  // one late tick counts the 16 periods that passed
  EXPECT_EQ(decisions_so_far(cluster), 0u);
  EXPECT_EQ(cluster.advance(milliseconds(200)), 1u);
  expect_every_rank_decided(cluster, {decision(1, phase, Decision::abort, status_timeout(0))});
}

TEST_P(CoordinatorOrderTest, TheLogitsReachTheReplyWhetherTheyArriveBeforeOrAfterTheOwnersStatus) {
  const RankId ranks = GetParam();
  const RankId owner = ranks - 1;
  const WireTensor logits{{1, 3}, {0.5f, -1.0f, 2.0f}};
  for (const bool before_status : {true, false}) {
    SCOPED_TRACE(before_status ? "StepOutput before the status" : "StepOutput after the status");
    ScriptedCluster cluster(ranks);
    cluster.request(forward_step());
    cluster.agree_until(OutputPublication);
    const StepOutput output{kSession, cluster.epoch(), logits};
    if (before_status) cluster.send_as(owner, output);
    cluster.answer_all();
    // After: the phase is decided and the next one runs when it arrives.
    ASSERT_EQ(cluster.phase(), phase_id(MechanismCompletion));
    if (!before_status) cluster.send_as(owner, output);
    // Logits of an earlier epoch are not this transaction's.
    cluster.send_as(owner, StepOutput{kSession, cluster.epoch() - 1, WireTensor{{1, 1}, {9.0f}}});
    cluster.agree_until(Commit);
    cluster.answer_all();
    ASSERT_EQ(cluster.replies().size(), 1u);
    EXPECT_EQ(cluster.replies()[0].outcome, TransactionOutcome::committed);
    EXPECT_EQ(cluster.replies()[0].logits, logits);
  }
}

TEST_P(CoordinatorOrderTest, ASecondRequestWhileOneIsOpenIsRefusedAndTheFirstCompletes) {
  ScriptedCluster cluster(GetParam());
  cluster.request(forward_step());
  cluster.answer_all();  // the first transaction's first phase is decided
  const std::size_t begun = cluster.seen_by(0).begins.size();
  cluster.request(forward_step());
  ASSERT_EQ(cluster.replies().size(), 1u);
  EXPECT_EQ(cluster.replies()[0].outcome, TransactionOutcome::refused);
  EXPECT_EQ(cluster.replies()[0].message, "the session is running another transaction");
  EXPECT_EQ(cluster.seen_by(0).begins.size(), begun);  // the refused one began nothing
  cluster.agree_until(Commit);
  cluster.answer_all();
  ASSERT_EQ(cluster.replies().size(), 2u);
  EXPECT_EQ(cluster.replies()[1].outcome, TransactionOutcome::committed);
  EXPECT_EQ(cluster.replies()[1].epoch, 1u);
  // The refused request took no epoch: the next transaction is epoch 2.
  cluster.request(forward_step());
  EXPECT_EQ(cluster.epoch(), 2u);
}

// ---------------------------------------------------------------------------
// Dropped statuses and acknowledgements. A duplicate needs a second rank
// still to answer, so these run on 2 to 4 ranks.

class CoordinatorDropTest : public ::testing::TestWithParam<RankId> {};

INSTANTIATE_TEST_SUITE_P(Ranks, CoordinatorDropTest, ::testing::Values(2u, 3u, 4u), rank_count_name);

TEST_P(CoordinatorDropTest, ADuplicatedStatusIsCountedAndDecidesOnce) {
  ScriptedCluster cluster(GetParam());
  cluster.request(forward_step());
  const PhaseId phase = cluster.phase();
  cluster.answer(0);
  cluster.answer(0);
  // A duplicated error after an ok changes nothing either: the first answer counts.
  cluster.answer(0, false);
  for (RankId rank = 1; rank < cluster.rank_count(); ++rank) cluster.answer(rank);
  finish_round(cluster);
  EXPECT_EQ(decisions_of(cluster, 1, phase), std::vector{decision(1, phase, Decision::proceed)});
  expect_dropped(cluster.dropped(), {{DropReason::duplicate, 2}});
  ASSERT_EQ(cluster.replies().size(), 1u);
  EXPECT_EQ(cluster.replies()[0].outcome, TransactionOutcome::committed);
}

TEST_P(CoordinatorDropTest, StatusesAfterTheDecisionOrForAnotherEpochPhaseOrRankAreDropped) {
  ScriptedCluster cluster(GetParam());
  const RankId ranks = cluster.rank_count();
  cluster.request(forward_step());
  cluster.agree_until(Commit);
  cluster.answer_all();
  const PhaseStatus after_commit = cluster.status(0);
  cluster.send_as(0, after_commit);  // late: epoch 1 is decided
  cluster.request(forward_step());   // epoch 2
  ASSERT_EQ(cluster.epoch(), 2u);
  const std::size_t decided = decisions_so_far(cluster);

  PhaseStatus stale = cluster.status(0);
  stale.epoch = 1;
  PhaseStatus future = cluster.status(0);
  future.epoch = 3;
  PhaseStatus other_phase = cluster.status(0);
  other_phase.phase = phase_id(SessionCheckpoint);  // not a phase of a forward step
  PhaseStatus unknown_rank = cluster.status(0);
  unknown_rank.rank = ranks;
  PhaseStatus other_session = cluster.status(0);
  other_session.session = kSession + 1;
  for (const auto& status : {stale, future, other_phase, unknown_rank, other_session}) cluster.send_as(0, status);
  EXPECT_EQ(decisions_so_far(cluster), decided);

  // None of them counted as rank 0's answer: its own is no duplicate, and
  // the phase is decided once.
  for (RankId rank = 1; rank < ranks; ++rank) cluster.answer(rank);
  cluster.answer(0);
  finish_round(cluster);
  const PhaseId checkpoint = phase_id(StateCheckpoint);
  EXPECT_EQ(decisions_of(cluster, 2, checkpoint), std::vector{decision(2, checkpoint, Decision::proceed)});
  expect_dropped(cluster.dropped(), {{DropReason::late, 2},
                                     {DropReason::stale_epoch, 1},
                                     {DropReason::future_epoch, 1},
                                     {DropReason::unknown_rank, 1},
                                     {DropReason::other_session, 1}});
  EXPECT_EQ(cluster.replies().size(), 2u);  // the late status made no reply of its own
}

TEST_P(CoordinatorDropTest, AcknowledgementsBeforeTheAbortDuplicatedOrAfterItAreDropped) {
  ScriptedCluster cluster(GetParam());
  const RankId ranks = cluster.rank_count();
  cluster.request(forward_step());
  const PhaseId phase = cluster.phase();
  cluster.acknowledge(0);  // before any abort: nothing awaits it
  EXPECT_EQ(decisions_so_far(cluster), 0u);
  cluster.answer(ranks - 1, false);
  cluster.acknowledge(0);
  cluster.acknowledge(0);  // duplicated
  for (RankId rank = 1; rank + 1 < ranks; ++rank) cluster.acknowledge(rank);
  // Only the last rank's acknowledgement is missing: no reply yet.
  EXPECT_TRUE(cluster.replies().empty());
  cluster.acknowledge(ranks - 1);
  cluster.acknowledge(ranks - 1);  // after the abort settled
  expect_every_rank_decided(cluster, {decision(1, phase, Decision::abort, rank_error(ranks - 1))});
  ASSERT_EQ(cluster.replies().size(), 1u);
  EXPECT_EQ(cluster.replies()[0].outcome, TransactionOutcome::aborted);
  expect_dropped(cluster.dropped(), {{DropReason::late, 2}, {DropReason::duplicate, 1}});
}

// ---------------------------------------------------------------------------
// A rank's actor, spawned by spawn_rank on the test's scheduler, against a
// scripted coordinator and scripted other ranks. Its local work runs inside
// its message handlers; a `delay` fault holds it back until the test sends
// the delayed_atom the actor's timer would, so "while the local work runs"
// is a state the test controls.

// What the scripted coordinator received from the rank.
struct CoordinatorLog {
  std::vector<PhaseStatus> statuses;
  std::vector<AbortAcknowledgement> acknowledgements;
  std::vector<std::size_t> batch_sizes;                // of the RankReports among them
  std::shared_ptr<std::vector<std::string>> arrivals;  // "reports" for each RankReports, as RankLog's

  void record(const PhaseStatus& status) { statuses.push_back(status); }
  void record(const AbortAcknowledgement& acknowledgement) { acknowledgements.push_back(acknowledgement); }
  void record(const auto&) {}  // what goes beside the statuses
};

caf::behavior scripted_coordinator(caf::event_based_actor* self, std::shared_ptr<CoordinatorLog> log) {
  // The logits and samples a rank publishes are not what these tests watch
  // (taken, as scripted_rank takes data).
  self->set_default_handler(caf::drop);
  return {
      [](const StepOutput&) {},
      [](const SamplingResult&) {},
      [=](const PhaseStatus& status) { log->record(status); },
      [=](const AbortAcknowledgement& acknowledgement) { log->record(acknowledgement); },
      [=](const RankReports& reports) {
        if (log->arrivals) log->arrivals->push_back("reports");
        log->batch_sizes.push_back(reports.items.size());
        for (const auto& item : reports.items) std::visit([&](const auto& m) { log->record(m); }, item);
      },
  };
}

const std::vector<int> kTokens = {1, 403, 407};

// Rank `rank` of `ranks` of the stories model: its real actor, over a real
// RankWorker, with a scripted coordinator and scripted other ranks.
class RankUnderTest {
 public:
  RankUnderTest(const Model& model, int rank, int ranks, std::vector<Fault> faults = {}) {
    auto worker =
        std::make_shared<RankWorker>(model, std::make_shared<cpu::ThreadPool>(1),
                                     *Partition::balanced(model.config().n_layers, ranks), rank, model_identity(model));
    log_->arrivals = arrivals_;
    coordinator_ = sys_.system.spawn(scripted_coordinator, log_);
    RankOptions options;
    options.faults = std::move(faults);
    actor_ = spawn_rank(sys_.system, std::move(worker), kSession, static_cast<RankId>(ranks),
                        caf::actor_cast<CoordinatorActor>(coordinator_), options);
    RankTopology topology;
    for (int r = 0; r < ranks; ++r) {
      auto other = std::make_shared<RankLog>();
      other->arrivals = arrivals_;
      others_.push_back(r == rank ? caf::actor_cast<caf::actor>(actor_) : sys_.system.spawn(scripted_rank, other));
      topology.ranks.push_back(caf::actor_cast<RankActor>(others_.back()));
    }
    caf::anon_send(actor_, std::move(topology));
    prober_ = sys_.system.spawn(caller, caf::actor_cast<caf::actor>(actor_), prober_log_);
    sys_.deliver();
  }

  ~RankUnderTest() {
    for (const auto& actor : others_) caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
    for (const auto& actor : {coordinator_, prober_}) caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
    sys_.deliver();
  }

  RankUnderTest(const RankUnderTest&) = delete;
  RankUnderTest& operator=(const RankUnderTest&) = delete;

  const std::vector<PhaseStatus>& statuses() const { return log_->statuses; }
  const std::vector<AbortAcknowledgement>& acknowledgements() const { return log_->acknowledgements; }
  const std::vector<std::size_t>& report_batch_sizes() const { return log_->batch_sizes; }
  // What reached the scripted coordinator and ranks, in the order the
  // deterministic scheduler ran it, which is the order it was sent in.
  const std::vector<std::string>& arrivals() const { return *arrivals_; }

  // Sends `message` as the coordinator's and runs everything that follows.
  template <class Message>
  void send(Message message) {
    caf::send_as(coordinator_, actor_, std::move(message));
    sys_.deliver();
  }
  // The rank's timer fires: the local work a `delay` fault held back in
  // `epoch` runs now.
  void release_held_back(Epoch epoch) {
    caf::anon_send(actor_, delayed_atom::value, epoch);
    sys_.deliver();
  }

  RankStateReport state() {
    caf::anon_send(prober_, rank_state_atom::value);
    sys_.deliver();
    return prober_log_->state;
  }

  DroppedMessages dropped() {
    caf::anon_send(prober_, dropped_atom::value);
    sys_.deliver();
    return DroppedMessages::from_counts(prober_log_->dropped);
  }

 private:
  DeterministicSystem sys_;
  std::shared_ptr<CoordinatorLog> log_ = std::make_shared<CoordinatorLog>();
  std::shared_ptr<std::vector<std::string>> arrivals_ = std::make_shared<std::vector<std::string>>();
  caf::actor coordinator_;
  RankActor actor_;
  std::vector<caf::actor> others_;  // the scripted ranks, and the rank's actor in its place
  caf::actor prober_;
  std::shared_ptr<CallerLog> prober_log_ = std::make_shared<CallerLog>();
};

PhaseBegin begin(Epoch epoch, PhaseId phase, PhaseArguments arguments = {}) {
  return {kSession, epoch, phase, std::move(arguments), {}};
}

PhaseStatus ok_from(RankId rank, Epoch epoch, PhaseId phase) {
  return {kSession, epoch, phase, rank, true, FailureCode::mechanism, {}};
}

// The rank agrees `phase` of `epoch`: it begins, the rank reports ok, and the
// coordinator proceeds.
void agree(RankUnderTest& rank, RankId id, Epoch epoch, PhaseId phase, PhaseArguments arguments = {}) {
  rank.send(begin(epoch, phase, std::move(arguments)));
  ASSERT_FALSE(rank.statuses().empty());
  ASSERT_EQ(rank.statuses().back(), ok_from(id, epoch, phase));
  rank.send(decision(epoch, phase, Decision::proceed));
}

const PhaseId kCompletion01 = boundary_phase_id(BoundarySourceCompletion, 0, 1);
const PhaseId kReady01 = boundary_phase_id(BoundarySourceReady, 0, 1);

class RankOrderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = std::make_unique<Model>(test::load_stories_model()); }
  static void TearDownTestSuite() { model_.reset(); }
  static const Model& model() { return *model_; }
  static inline std::unique_ptr<Model> model_;

  // Activations for the route 0->1 of a step over kTokens.
  static RouteTransfer activations(Epoch epoch, SessionId session = kSession) {
    const int dim = model().config().dim;
    return {session,
            epoch,
            {0, 1},
            WireTensor{{static_cast<std::int64_t>(kTokens.size()), dim},
                       std::vector<float>(kTokens.size() * static_cast<std::size_t>(dim), 0.25f)}};
  }
};

TEST_F(RankOrderTest, WhatOneMessageLetsTheRankReportGoesAsOneMessageInOrder) {
  RankUnderTest rank(model(), 0, 2);
  PhaseBegin round = begin(1, phase_id(StateCheckpoint), StepTokens{kTokens});
  round.riders = {Rider{kCompletion01, {}}, Rider{kReady01, {}}};
  rank.send(round);
  EXPECT_EQ(rank.statuses(), (std::vector{ok_from(0, 1, phase_id(StateCheckpoint)), ok_from(0, 1, kCompletion01),
                                          ok_from(0, 1, kReady01)}));
  EXPECT_EQ(rank.report_batch_sizes(), std::vector<std::size_t>{3});
  // The activations for rank 1 go after the reports: a CAF worker runs the
  // actor it scheduled last first, so rank 1 computes before the
  // coordinator takes reports that no rank waits for.
  EXPECT_EQ(rank.arrivals(), (std::vector<std::string>{"reports", "data"}));
  // The round's decisions and the next round's begin, as the coordinator
  // batches them, are taken in order.
  rank.send(RankInstructions{{decision(1, phase_id(StateCheckpoint), Decision::proceed),
                              decision(1, kCompletion01, Decision::proceed), decision(1, kReady01, Decision::proceed),
                              begin(1, phase_id(Execution), ExecutionArguments{})}});
  EXPECT_EQ(rank.statuses().back(), ok_from(0, 1, phase_id(Execution)));
  expect_dropped(rank.dropped(), {});
}

TEST_F(RankOrderTest, AnAbortWhileTheLocalWorkRunsRestoresOnlyAfterTheWorkFinished) {
  RankUnderTest rank(model(), 0, 2, {*parse_fault("0:BoundarySourceCompletion(0->1):delay")});
  const std::string committed = rank.state().digest;
  agree(rank, 0, 1, phase_id(StateCheckpoint), StepTokens{kTokens});
  // Rank 0's units for the route are held back, and the abort overtakes them.
  rank.send(begin(1, kCompletion01));
  rank.send(decision(1, kCompletion01, Decision::abort, rank_error(1)));
  // The abort is noted, but the restore waits: the units have not run yet,
  // and a restore under them would be undone by their writes.
  EXPECT_TRUE(rank.acknowledgements().empty());
  rank.release_held_back(1);
  // The units' status no longer matters and is not sent; their result was
  // awaited, so it is not counted late.
  EXPECT_EQ(rank.statuses().size(), 1u);
  ASSERT_EQ(rank.acknowledgements().size(), 1u);
  EXPECT_TRUE(rank.acknowledgements()[0].restored) << rank.acknowledgements()[0].error_message;
  EXPECT_EQ(rank.state().digest, committed);
  expect_dropped(rank.dropped(), {});
}

TEST_F(RankOrderTest, AProceedWhileTheLocalWorkRunsIsOutOfOrderAndTheStatusStillGoes) {
  RankUnderTest rank(model(), 0, 2, {*parse_fault("0:StateCheckpoint:delay")});
  rank.send(begin(1, phase_id(StateCheckpoint), StepTokens{kTokens}));
  rank.send(decision(1, phase_id(StateCheckpoint), Decision::proceed));
  EXPECT_TRUE(rank.statuses().empty());
  rank.release_held_back(1);
  ASSERT_EQ(rank.statuses().size(), 1u);
  EXPECT_EQ(rank.statuses()[0], ok_from(0, 1, phase_id(StateCheckpoint)));
  expect_dropped(rank.dropped(), {{DropReason::out_of_order, 1}});
}

TEST_F(RankOrderTest, ADuplicatedBeginRunsTheLocalWorkOnce) {
  RankUnderTest rank(model(), 0, 2, {*parse_fault("0:StateCheckpoint:delay")});
  const PhaseBegin checkpoint = begin(1, phase_id(StateCheckpoint), StepTokens{kTokens});
  rank.send(checkpoint);
  rank.send(checkpoint);  // while the work is held back
  rank.release_held_back(1);
  rank.send(checkpoint);  // after the status went
  EXPECT_EQ(rank.statuses(), std::vector<PhaseStatus>{ok_from(0, 1, phase_id(StateCheckpoint))});
  expect_dropped(rank.dropped(), {{DropReason::duplicate, 2}});
  // The duplicates took nothing from the phase: it goes on.
  rank.send(decision(1, phase_id(StateCheckpoint), Decision::proceed));
  rank.send(begin(1, kCompletion01));
  EXPECT_EQ(rank.statuses().back(), ok_from(0, 1, kCompletion01));
}

TEST_F(RankOrderTest, ARouteTransferBeforeOrAfterItsReadyBeginIsAccepted) {
  for (const bool before_begin : {true, false}) {
    SCOPED_TRACE(before_begin ? "transfer before the begin" : "transfer after the begin");
    RankUnderTest rank(model(), 1, 2);
    agree(rank, 1, 1, phase_id(StateCheckpoint), StepTokens{kTokens});
    agree(rank, 1, 1, kCompletion01);
    // Rank 0's transfer may overtake the coordinator's begin on its way.
    if (before_begin) rank.send(activations(1));
    rank.send(begin(1, kReady01));
    if (!before_begin) {
      EXPECT_EQ(rank.statuses().size(), 2u);  // the target waits for the activations
      rank.send(activations(1));
    }
    ASSERT_EQ(rank.statuses().size(), 3u);
    EXPECT_EQ(rank.statuses().back(), ok_from(1, 1, kReady01)) << rank.statuses().back().error_message;
    expect_dropped(rank.dropped(), {});
  }
}

// Whether the logits go to the caller is OutputPublication's argument; the
// output owner refuses a publication that does not say.
TEST_F(RankOrderTest, TheOutputOwnerRefusesAPublicationWithoutItsArguments) {
  RankUnderTest rank(model(), 0, 1);
  agree(rank, 0, 1, phase_id(StateCheckpoint), StepTokens{kTokens});
  agree(rank, 0, 1, phase_id(Execution), ExecutionArguments{false});
  agree(rank, 0, 1, phase_id(OutputObservation));
  rank.send(begin(1, phase_id(OutputPublication)));
  ASSERT_FALSE(rank.statuses().empty());
  const PhaseStatus& status = rank.statuses().back();
  EXPECT_EQ(status.phase, phase_id(OutputPublication));
  EXPECT_FALSE(status.ok);
  EXPECT_NE(status.error_message.find("malformed publication arguments"), std::string::npos) << status.error_message;
}

// A save's preparation checks the prefix itself: a coordinator that skipped
// the preflight must not make the rank pack rows it never wrote.
TEST_F(RankOrderTest, ASavePreparationRefusesAPrefixTheRankDoesNotHold) {
  RankUnderTest rank(model(), 0, 1);
  test::TempDir dir;
  const std::vector<std::int32_t> prefix(static_cast<std::size_t>(model().config().seq_len) + 8, 1);
  rank.send(begin(1, phase_id(PromptCacheSavePreparation),
                  PromptCacheArguments{dir.path().string(), "unheld", "tests", "", "0123456789abcdef", prefix}));
  ASSERT_FALSE(rank.statuses().empty());
  const PhaseStatus& status = rank.statuses().back();
  EXPECT_FALSE(status.ok);
  EXPECT_NE(status.error_message.find("not the start of the session's tokens"), std::string::npos)
      << status.error_message;
}

TEST_F(RankOrderTest, ARouteTransferOfTheNextStepThatOvertakesThisStepsCommitIsKept) {
  // Node to node, rank 0's transfer of step 2 may come before the
  // coordinator's commit of step 1: rank 0 runs step 2 as soon as its
  // begin came, and its link to this rank is not the coordinator's. Rank 1
  // of 3 owns no output, which the scripted coordinator would refuse.
  RankUnderTest rank(model(), 1, 3);
  const PhaseId completion12 = boundary_phase_id(BoundarySourceCompletion, 1, 2);
  const PhaseId ready12 = boundary_phase_id(BoundarySourceReady, 1, 2);
  agree(rank, 1, 1, phase_id(StateCheckpoint), StepTokens{kTokens});
  agree(rank, 1, 1, kCompletion01);
  rank.send(activations(1));
  agree(rank, 1, 1, kReady01);
  agree(rank, 1, 1, completion12);
  agree(rank, 1, 1, ready12);
  agree(rank, 1, 1, phase_id(Execution), ExecutionArguments{false});
  for (auto phase : {OutputObservation, OutputPublication, MechanismCompletion}) agree(rank, 1, 1, phase_id(phase));
  rank.send(begin(1, phase_id(Commit)));
  rank.send(activations(2));
  rank.send(decision(1, phase_id(Commit), Decision::commit));

  agree(rank, 1, 2, phase_id(StateCheckpoint), StepTokens{kTokens});
  agree(rank, 1, 2, kCompletion01);
  rank.send(begin(2, kReady01));
  EXPECT_EQ(rank.statuses().back(), ok_from(1, 2, kReady01)) << "the transfer of step 2 was forgotten";
  expect_dropped(rank.dropped(), {});
}

TEST_F(RankOrderTest, AStaleOrForeignRouteTransferIsCountedAndCompletesNothing) {
  RankUnderTest rank(model(), 1, 2);
  agree(rank, 1, 2, phase_id(StateCheckpoint), StepTokens{kTokens});
  agree(rank, 1, 2, kCompletion01);
  rank.send(begin(2, kReady01));
  rank.send(activations(1));
  rank.send(activations(2, kSession + 1));
  EXPECT_EQ(rank.statuses().size(), 2u);  // still waiting for epoch 2's
  expect_dropped(rank.dropped(), {{DropReason::stale_epoch, 1}, {DropReason::other_session, 1}});
  rank.send(activations(2));
  EXPECT_EQ(rank.statuses().back(), ok_from(1, 2, kReady01));
}

}  // namespace
}  // namespace accord
