// The transaction engine over the direct transport (runtime/engine): the
// same plan, machines and local work as the actors, in the caller's thread.
// Any number of ranks gives the logits of one (docs/invariants.md,
// invariant 1), every fault kind aborts or poisons with every rank as it
// was, and time passes in ticks, so deadlines never depend on the
// machine's speed.
#include "runtime/engine/direct_engine.hpp"

#include <gtest/gtest.h>

#include "runtime/agreement/transaction_plan.hpp"
#include "runtime/engine/session_requests.hpp"
#include "runtime/engine/transaction_driver.hpp"
#include "runtime/io/mem_env.hpp"
#include "runtime/model/identity.hpp"
#include "runtime/rank/prompt_cache.hpp"
#include "runtime/session/session.hpp"
#include "runtime/text/sampler.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

const std::vector<int> kPrompt = {1, 403, 407, 261};

class DirectEngineTest : public ::testing::Test {
 protected:
  std::unique_ptr<DirectEngine> make_engine(int ranks, std::vector<Fault> faults = {}) {
    DirectEngineOptions options;
    options.faults = std::move(faults);
    return std::make_unique<DirectEngine>(model_, pool_, Partition::balanced(model_.config().n_layers, ranks).value(),
                                          identity_, 7, std::move(options));
  }

  // The prompt, then greedy decode steps: every step's logits, in order.
  std::vector<float> trace(DirectEngine& engine, int steps) {
    std::vector<float> logits;
    TransactionReply reply = engine.run(step_request(kPrompt, false));
    for (int i = 0;; ++i) {
      EXPECT_EQ(reply.outcome, TransactionOutcome::committed) << reply.message;
      logits.insert(logits.end(), reply.logits.data.begin(), reply.logits.data.end());
      if (i == steps) return logits;
      const int next = argmax(reply.logits.data);
      reply = engine.run(step_request({&next, 1}, false));
    }
  }

  static std::vector<std::string> digests(const DirectEngine& engine) {
    std::vector<std::string> out;
    for (int r = 0; r < engine.ranks(); ++r) out.push_back(engine.worker(r).digest());
    return out;
  }

  Model model_ = test::load_stories_model();
  std::string identity_ = model_identity(model_);
  std::shared_ptr<cpu::ThreadPool> pool_ = std::make_shared<cpu::ThreadPool>(1);
};

TEST_F(DirectEngineTest, AnyNumberOfRanksGivesTheLogitsOfOne) {
  cpu::ThreadPool pool(1);
  Session session(model_, pool);
  std::vector<float> expected;
  auto step = session.prefill(kPrompt);
  for (int i = 0;; ++i) {
    ASSERT_TRUE(step);
    expected.insert(expected.end(), step->logits.begin(), step->logits.end());
    if (i == 4) break;
    step = session.decode(argmax(step->logits));
  }
  for (int ranks = 1; ranks <= model_.config().n_layers; ++ranks) {
    auto engine = make_engine(ranks);
    EXPECT_TRUE(test::bit_identical(trace(*engine, 4), expected)) << ranks << " ranks";
  }
}

TEST_F(DirectEngineTest, TheOutputOwnerSamplesForEveryRank) {
  auto engine = make_engine(3);
  TransactionRequest request = step_request(kPrompt, false);
  SamplingArguments greedy;
  greedy.temperature = 0;  // the logits' argmax
  std::get<ForwardStepRequest>(request.operation).sampling = greedy;
  const TransactionReply reply = engine->run(request);
  ASSERT_EQ(reply.outcome, TransactionOutcome::committed) << reply.message;
  EXPECT_EQ(reply.sampled.token, argmax(reply.logits.data));
}

// Each fault kind, on a rank that is not the output owner and on one that
// is: the step aborts and every rank holds what it held before. A dropped
// status and a delayed phase abort at the deadline, counted in ticks.
TEST_F(DirectEngineTest, EveryFaultKindLeavesEveryRankAsItWas) {
  for (const char* text :
       {"0:StateCheckpoint:error", "1:Execution:throw", "0:BoundarySourceReady(0->1):drop", "1:OutputPublication:delay",
        "1:SamplingSynchronization:error", "0:SamplingSynchronization:throw", "1:Commit:error"}) {
    auto engine = make_engine(2);
    ASSERT_EQ(engine->run(step_request(kPrompt, false)).outcome, TransactionOutcome::committed);
    ASSERT_TRUE(engine->inject_faults({*parse_fault(text)}));
    const auto before = digests(*engine);
    TransactionRequest request = step_request(std::vector<int>{42}, false);
    std::get<ForwardStepRequest>(request.operation).sampling = SamplingArguments{};
    const auto failed = engine->run(request);
    EXPECT_EQ(failed.outcome, TransactionOutcome::aborted) << text << ": " << failed.message;
    EXPECT_EQ(digests(*engine), before) << text;
    EXPECT_EQ(engine->run(request).outcome, TransactionOutcome::committed) << text << ": the session goes on";
  }
}

TEST_F(DirectEngineTest, ARankThatExitsPoisonsUntilAResetStartsItAgain) {
  auto engine = make_engine(2);
  ASSERT_EQ(engine->run(step_request(kPrompt, false)).outcome, TransactionOutcome::committed);
  ASSERT_TRUE(engine->inject_faults({*parse_fault("1:Execution:exit")}));
  const int token = 42;
  const auto failed = engine->run(step_request({&token, 1}, false));
  EXPECT_EQ(failed.outcome, TransactionOutcome::poisoned);
  EXPECT_EQ(failed.poison_rank, 1u);
  EXPECT_TRUE(engine->poisoned());
  EXPECT_EQ(engine->run(step_request({&token, 1}, false)).outcome, TransactionOutcome::poisoned);

  const TransactionRequest reset{ResetRequest{}};
  ASSERT_EQ(engine->run(reset).outcome, TransactionOutcome::committed);
  EXPECT_FALSE(engine->poisoned());
  auto fresh = make_engine(2);
  EXPECT_TRUE(test::bit_identical(trace(*engine, 2), trace(*fresh, 2)));
}

TEST_F(DirectEngineTest, APromptCacheSavedOverRanksLoadsIntoAnotherEngine) {
  test::TempDir dir;
  const PromptCacheDescriptor descriptor{"direct", "tests"};
  auto saver = make_engine(3);
  ASSERT_EQ(saver->run(step_request(kPrompt, false)).outcome, TransactionOutcome::committed);
  const auto saved = saver->run(cache_request(TransactionKind::prompt_cache_save, dir.path(), descriptor, kPrompt, ""));
  ASSERT_EQ(saved.outcome, TransactionOutcome::committed) << saved.message;

  auto loader = make_engine(3, {*parse_fault("2:PromptCacheLoadPreparation:error")});
  const auto request = cache_request(TransactionKind::prompt_cache_load, dir.path(), descriptor, kPrompt, "");
  const auto before = digests(*loader);
  EXPECT_EQ(loader->run(request).outcome, TransactionOutcome::aborted);
  EXPECT_EQ(digests(*loader), before);
  const auto loaded = loader->run(request);
  ASSERT_EQ(loaded.outcome, TransactionOutcome::committed) << loaded.message;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(loader->worker(r).state().tokens().size(), kPrompt.size());
    EXPECT_EQ(loader->worker(r).position(), saver->worker(r).position());
  }
}

// A `corrupt` fault damages the shard after the save verified it, as a
// failing disk would: the save commits, and a load refuses the shard.
TEST_F(DirectEngineTest, ACorruptedShardIsRefusedByTheLoad) {
  test::TempDir dir;
  const PromptCacheDescriptor descriptor{"direct", "tests"};
  auto saver = make_engine(2, {*parse_fault("1:PromptCacheSavePreparation:corrupt")});
  ASSERT_EQ(saver->run(step_request(kPrompt, false)).outcome, TransactionOutcome::committed);
  const auto saved = saver->run(cache_request(TransactionKind::prompt_cache_save, dir.path(), descriptor, kPrompt, ""));
  ASSERT_EQ(saved.outcome, TransactionOutcome::committed) << saved.message;

  auto loader = make_engine(2);
  const auto before = digests(*loader);
  const auto loaded =
      loader->run(cache_request(TransactionKind::prompt_cache_load, dir.path(), descriptor, kPrompt, ""));
  EXPECT_EQ(loaded.outcome, TransactionOutcome::aborted);
  EXPECT_EQ(loaded.error_code, FailureCode::prompt_cache) << loaded.message;
  EXPECT_EQ(digests(*loader), before);
}

}  // namespace
}  // namespace accord

namespace accord {
namespace {

// Bugs the simulator found (docs/simulation.md), kept as tests.

const std::vector<int> kCachePrefix = {1, 403, 407};

TransactionRequest save_request(int tag) {
  auto request = cache_request(TransactionKind::prompt_cache_save, "/cache", {"sim", "tests"}, kCachePrefix, "");
  std::get<PromptCacheSaveRequest>(request.operation).arguments.save_id = std::string(16, static_cast<char>('a' + tag));
  return request;
}

TransactionRequest load_request() {
  return cache_request(TransactionKind::prompt_cache_load, "/cache", {"sim", "tests"}, kCachePrefix, "");
}

// Fails the first `operation` on `path` from now on; the flag says it did.
std::shared_ptr<bool> fail_once(MemEnv& disk, std::string operation, std::filesystem::path path) {
  auto failed = std::make_shared<bool>(false);
  disk.set_fault_hook([=](std::string_view op, const std::filesystem::path& p) {
    if (*failed || op != operation || p != path) return false;
    return *failed = true;
  });
  return failed;
}

class SimulatorFindingsTest : public DirectEngineTest {
 protected:
  std::unique_ptr<DirectEngine> engine_on(MemEnv& disk, int ranks) {
    DirectEngineOptions options;
    options.env = &disk;
    return std::make_unique<DirectEngine>(model_, pool_, Partition::balanced(model_.config().n_layers, ranks).value(),
                                          identity_, 7, std::move(options));
  }

  // An engine on `disk` that has run the prompt.
  std::unique_ptr<DirectEngine> prompted(MemEnv& disk, int ranks) {
    auto engine = engine_on(disk, ranks);
    EXPECT_EQ(engine->run(step_request(kCachePrefix, false)).outcome, TransactionOutcome::committed);
    return engine;
  }

  // Every rank's CURRENT names a whole generation of save `save_id`.
  static void expect_live_everywhere(MemEnv& disk, int ranks, const std::string& save_id) {
    for (int r = 0; r < ranks; ++r) {
      auto live = read_live_generation("/cache", r, disk);
      ASSERT_TRUE(live) << "rank " << r << ": " << live.error().message();
      EXPECT_EQ(live->manifest.save_id, save_id);
      EXPECT_TRUE(read_shard(*live));
    }
  }

  // The disk loses power; a fresh engine then loads the prompt's save.
  void expect_load_after_power_loss(MemEnv& disk, int ranks) {
    disk.crash();
    const auto loaded = engine_on(disk, ranks)->run(load_request());
    EXPECT_EQ(loaded.outcome, TransactionOutcome::committed) << loaded.message;
  }
};

// A power loss lost the rank folders of a committed save: they were
// created without syncing the folder above them.
TEST_F(SimulatorFindingsTest, ACommittedSaveSurvivesAPowerLoss) {
  MemEnv disk;
  auto engine = prompted(disk, 2);
  ASSERT_EQ(engine->run(save_request(0)).outcome, TransactionOutcome::committed);
  engine.reset();
  expect_load_after_power_loss(disk, 2);
}

// CURRENT's switch failed after its rename (the folder's sync failed): the
// publication removed its generation and left CURRENT naming it.
TEST_F(SimulatorFindingsTest, ASwitchOfCurrentThatFailsAfterItsRenameIsReverted) {
  MemEnv disk;
  auto engine = prompted(disk, 2);
  ASSERT_EQ(engine->run(save_request(0)).outcome, TransactionOutcome::committed);
  const auto before = read_live_generation("/cache", 0, disk);
  ASSERT_TRUE(before);

  const auto failed_once = fail_once(disk, "sync_folder", "/cache/rank-00");
  const auto aborted = engine->run(save_request(1));
  EXPECT_EQ(aborted.outcome, TransactionOutcome::aborted) << aborted.message;
  EXPECT_TRUE(*failed_once);
  expect_live_everywhere(disk, 2, before->manifest.save_id);
  EXPECT_EQ(engine_on(disk, 2)->run(load_request()).outcome, TransactionOutcome::committed);
}

// The folders' creation failed to sync (the save aborted): a later save
// found them there and never synced their names, so a power loss took them.
TEST_F(SimulatorFindingsTest, FoldersAnEarlierSaveFailedToSyncSurviveAPowerLoss) {
  MemEnv disk;
  auto engine = prompted(disk, 1);  // a second rank's folder would sync the first's name
  const auto failed_once = fail_once(disk, "sync_folder", "/cache");
  EXPECT_EQ(engine->run(save_request(0)).outcome, TransactionOutcome::aborted);
  ASSERT_TRUE(*failed_once);
  ASSERT_EQ(engine->run(save_request(1)).outcome, TransactionOutcome::committed);
  engine.reset();
  expect_load_after_power_loss(disk, 1);
}

// CURRENT could not be read when a save published: the publication took it
// for "none", and the abort then deleted the live generation's name.
TEST_F(SimulatorFindingsTest, AnUnreadableCurrentStopsThePublicationAndKeepsTheLiveGeneration) {
  MemEnv disk;
  auto engine = prompted(disk, 2);
  ASSERT_EQ(engine->run(save_request(0)).outcome, TransactionOutcome::committed);
  const auto failed_once = fail_once(disk, "read", "/cache/rank-00/CURRENT");
  ASSERT_TRUE(engine->inject_faults({*parse_fault("1:PromptCacheSavePublication:error")}));
  EXPECT_EQ(engine->run(save_request(1)).outcome, TransactionOutcome::aborted);
  ASSERT_TRUE(*failed_once);
  expect_live_everywhere(disk, 2, std::get<PromptCacheSaveRequest>(save_request(0).operation).arguments.save_id);
}

// Reordered and duplicated checkpoint reports: one per rank, in rank order.
TEST(TransactionDriverTest, ACheckpointHasOneReportPerRankInRankOrder) {
  constexpr SessionId kSession = 3;
  TransactionDriver driver(kSession, 2);
  const TransactionRequest request{CheckpointRequest{}};
  ASSERT_FALSE(driver.start(request));
  const Epoch epoch = 1;
  for (RankId rank : {1u, 0u, 1u}) {
    driver.collect(RankCheckpointReport{kSession, epoch, rank, static_cast<std::int32_t>(rank), 0, 0, ""});
  }
  for (const PhaseId& phase : phases_of(request, 2)) {
    for (RankId rank : {0u, 1u}) driver.step(PhaseStatus{kSession, epoch, phase, rank, true, {}, {}});
  }
  const auto reply = driver.take_ready().reply;
  ASSERT_TRUE(reply);
  ASSERT_EQ(reply->outcome, TransactionOutcome::committed) << reply->message;
  ASSERT_EQ(reply->checkpoints.size(), 2u);
  EXPECT_EQ(reply->checkpoints[0].rank, 0u);
  EXPECT_EQ(reply->checkpoints[1].rank, 1u);
}

// New deadlines count from the next tick: a step whose statuses are
// missing aborts after the new status deadline, not the old one.
TEST(TransactionDriverTest, DeadlinesSetLaterAreTheOnesThatPass) {
  TransactionDriver driver(3, 2, AgreementOptions{100, 100});
  driver.set_deadlines({3, 3});
  ASSERT_FALSE(driver.start(step_request(kCachePrefix, false)));
  (void)driver.take_ready();
  for (int tick = 0; tick < 2; ++tick) driver.tick();
  EXPECT_TRUE(driver.agreeing());
  driver.tick();
  const DriverReady ready = driver.take_ready();
  ASSERT_FALSE(ready.messages.empty());
  const auto* abort = std::get_if<PhaseDecision>(&ready.messages.front().message);
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->decision, Decision::abort);
}

}  // namespace
}  // namespace accord
