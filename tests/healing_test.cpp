// Healing (docs/healing.md): a rank that is lost, in process or
// on a node, is started afresh, the committed tokens are replayed and
// generation goes on with the tokens of a run without the failure; heals
// are bounded and a session that cannot heal fails naming why. Then the
// chaos runs: generations on three in-process ranks and on three node
// processes that lose ranks at random moments (exits, kill -9, SIGSTOP and
// SIGCONT); every run ends with the reference tokens or fails naming its
// cause, and none is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <random>
#include <thread>

#include "actors/distributed_session.hpp"
#include "actors/distributed_target.hpp"
#include "runtime/generate/generator.hpp"
#include "tests/node_process.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

using Clock = std::chrono::steady_clock;
using test::NodeProcess;

constexpr const char* kPrompt = "Once upon a time";

// Sampled, not greedy: a heal must leave the sampler's stream as it was too.
GenerationOptions sampled(int max_tokens, int heal_attempts = 3) {
  GenerationOptions options;
  options.max_tokens = max_tokens;
  options.sampler = {0.8f, 0.9f, 42};
  options.heal_attempts = heal_attempts;
  options.heal_backoff = std::chrono::milliseconds(100);
  return options;
}

std::unique_ptr<DistributedSession> in_process(const Model& model, std::vector<Fault> faults = {}) {
  DistributedOptions options;
  options.ranks = 3;
  options.faults = std::move(faults);
  auto session = DistributedSession::create(model, options);
  EXPECT_TRUE(session) << session.error().message();
  return session ? std::move(*session) : nullptr;
}

GenerationOutcome run(DistributedSession& session, const Model& model, const Tokenizer& tokenizer,
                      const GenerationOptions& options) {
  DistributedTarget target(session, model);
  return generate(target, tokenizer, kPrompt, options);
}

// The tokens of a run that loses nothing.
std::vector<int> reference_tokens(const Model& model, const Tokenizer& tokenizer, int max_tokens) {
  auto session = in_process(model);
  auto outcome = run(*session, model, tokenizer, sampled(max_tokens));
  EXPECT_TRUE(outcome) << outcome.error().message();
  return outcome ? outcome->generated_tokens : std::vector<int>{};
}

class HealingTest : public ::testing::Test {
 protected:
  Model model_ = test::load_stories_model();
  Tokenizer tokenizer_ = test::load_stories_tokenizer();
};

TEST_F(HealingTest, AnExitedRankIsRestartedAndTheTokensAreThoseOfARunWithoutIt) {
  const auto expected = reference_tokens(model_, tokenizer_, 40);
  auto session = in_process(model_, {parse_fault("1:Execution:exit:9").value()});
  auto outcome = run(*session, model_, tokenizer_, sampled(40));
  ASSERT_TRUE(outcome) << outcome.error().message();
  EXPECT_EQ(outcome->generated_tokens, expected);
  EXPECT_EQ(outcome->heals, 1);
  EXPECT_EQ(outcome->heal_attempts, 1);
  // The prompt's 5 tokens and the 7 generated before the 9th step poisoned.
  EXPECT_EQ(outcome->replayed_tokens, 12);
  EXPECT_GT(outcome->heal_seconds, 0.0);
}

// The generator saved the prompt's prefix; the heal loads it rather than
// replay it.
TEST_F(HealingTest, AHealLoadsThePromptCacheTheSessionSaved) {
  const auto expected = reference_tokens(model_, tokenizer_, 40);
  test::TempDir cache;
  auto session = in_process(model_, {parse_fault("1:Execution:exit:9").value()});
  GenerationOptions options = sampled(40);
  options.prompt_cache = cache.path();
  auto outcome = run(*session, model_, tokenizer_, options);
  ASSERT_TRUE(outcome) << outcome.error().message();
  EXPECT_EQ(outcome->prompt_cache, PromptCacheOutcome::saved);
  EXPECT_EQ(outcome->generated_tokens, expected);
  EXPECT_EQ(outcome->heals, 1);
  // 12 committed tokens: the prompt's first 4 from the cache, 8 replayed.
  EXPECT_EQ(outcome->replayed_tokens, 8);
}

TEST_F(HealingTest, WithoutHealAttemptsAPoisonEndsGeneration) {
  auto session = in_process(model_, {parse_fault("1:Execution:exit:9").value()});
  auto outcome = run(*session, model_, tokenizer_, sampled(40, 0));
  ASSERT_FALSE(outcome);
  EXPECT_NE(outcome.error().message().find("rank 1 is down"), std::string::npos) << outcome.error().message();
  EXPECT_EQ(outcome.error().partial.heals, 0);
}

// Three nodes and a spare, on loopback.
class RemoteHealingTest : public HealingTest {
 protected:
  void SetUp() override {
    for (int r = 0; r < 4; ++r) nodes_.push_back(std::make_unique<NodeProcess>(logs_));
    for (const auto& node : nodes_) ASSERT_NE(node->port(), 0);
  }

  std::unique_ptr<DistributedSession> connect(std::vector<NodeAddress> spares) {
    DistributedOptions options;
    options.spares = std::move(spares);
    auto session = DistributedSession::connect({nodes_[0]->address(), nodes_[1]->address(), nodes_[2]->address()},
                                               model_, options);
    EXPECT_TRUE(session) << session.error().message();
    return session ? std::move(*session) : nullptr;
  }

  // Generates while `lose` runs once the generation is under way.
  GenerationOutcome run_losing(DistributedSession& session, int max_tokens, const std::function<void()>& lose,
                               int heal_attempts = 3) {
    std::atomic<bool> started = false;
    GenerationOptions options = sampled(max_tokens, heal_attempts);
    DistributedTarget target(session, model_);
    std::thread loser([&] {
      while (!started) std::this_thread::yield();
      lose();
    });
    auto outcome = generate(target, tokenizer_, kPrompt, options, [&](std::string_view) { started = true; });
    loser.join();
    return outcome;
  }

  // Each node's log, for a failure's message.
  std::string node_logs() const {
    std::string text;
    for (std::size_t r = 0; r < nodes_.size(); ++r) text += "node " + std::to_string(r) + ":\n" + nodes_[r]->log();
    return text;
  }

  test::TempDir logs_;
  std::vector<std::unique_ptr<NodeProcess>> nodes_;
};

TEST_F(RemoteHealingTest, AKilledNodesRankMovesToASpare) {
  const auto expected = reference_tokens(model_, tokenizer_, 200);
  auto session = connect({nodes_[3]->address()});
  ASSERT_TRUE(session);
  auto outcome = run_losing(*session, 200, [&] { nodes_[1]->kill_hard(); });
  ASSERT_TRUE(outcome) << outcome.error().message();
  EXPECT_EQ(outcome->generated_tokens, expected);
  // The kill may land after the last step; then there was nothing to heal.
  EXPECT_LE(outcome->heals, 1);
  if (outcome->heals == 1) {
    EXPECT_NE(nodes_[3]->log().find("runs rank 1 of 3"), std::string::npos) << nodes_[3]->log();
  }
}

TEST_F(RemoteHealingTest, ANodeRestartedOnItsAddressTakesItsRankBack) {
  const auto expected = reference_tokens(model_, tokenizer_, 200);
  auto session = connect({});
  ASSERT_TRUE(session);
  const std::uint16_t port = nodes_[2]->port();
  // Attempts enough for a node that starts slowly on a loaded machine.
  auto outcome = run_losing(
      *session, 200,
      [&] {
        nodes_[2]->kill_hard();
        nodes_[2] = std::make_unique<NodeProcess>(logs_, test::test_node_options(), port);
      },
      9);
  ASSERT_TRUE(outcome) << outcome.error().message();
  EXPECT_EQ(outcome->generated_tokens, expected);
}

TEST_F(RemoteHealingTest, ANodeThatStaysAwayFailsTheSessionNamingItAfterTheAttempts) {
  auto session = connect({});
  ASSERT_TRUE(session);
  const std::string address = nodes_[1]->address().to_string();
  nodes_[1]->kill_hard();
  auto outcome = run(*session, model_, tokenizer_, sampled(20, 2));
  ASSERT_FALSE(outcome);
  const std::string& message = outcome.error().message();
  EXPECT_NE(message.find("rank 1 is down"), std::string::npos) << message;
  EXPECT_NE(message.find("healing failed after 2 attempt(s)"), std::string::npos) << message;
  EXPECT_NE(message.find("cannot reach node " + address), std::string::npos) << message;
  EXPECT_EQ(outcome.error().partial.heal_attempts, 2);
}

// --- chaos --------------------------------------------------------------------

// How chaos runs ended.
struct ChaosTally {
  int runs = 0;
  int reference = 0;      // every token the reference's
  int named_failure = 0;  // failed, naming its cause, with a prefix of the reference
  int wrong = 0;          // any token not the reference's
  int heals = 0;

  void count(const GenerationOutcome& outcome, const std::vector<int>& expected) {
    ++runs;
    const GenerationResult& result = outcome ? *outcome : outcome.error().partial;
    heals += result.heals;
    const auto& got = result.generated_tokens;
    const bool prefix = got.size() <= expected.size() && std::equal(got.begin(), got.end(), expected.begin());
    if (!prefix || (outcome && got != expected)) {
      ++wrong;
    } else if (outcome) {
      ++reference;
    } else {
      ++named_failure;
      EXPECT_FALSE(outcome.error().message().empty());
    }
  }

  void print(const std::string& what) const {
    std::cout << what << ": " << runs << " runs, " << reference << " with the reference tokens, " << named_failure
              << " failed naming the cause, " << wrong << " wrong; " << heals << " heals\n";
  }
};

// 150 generations on three in-process ranks; each loses a rank, by an
// `exit` fault at a random phase and step or by stop_rank at a random
// moment from another thread.
TEST_F(HealingTest, ChaosInProcessRanksLostAtRandomMoments) {
  constexpr int kRuns = 150;
  constexpr int kTokens = 32;
  const auto expected = reference_tokens(model_, tokenizer_, kTokens);
  const char* phases[] = {"StateCheckpoint", "Execution", "OutputObservation", "SamplingSynchronization", "Commit"};
  std::mt19937 random(1616);
  ChaosTally tally;
  for (int i = 0; i < kRuns; ++i) {
    const int rank = static_cast<int>(random() % 3);
    std::vector<Fault> faults;
    if (i % 2 == 0) {
      const std::string fault =
          std::to_string(rank) + ":" + phases[random() % 5] + ":exit:" + std::to_string(1 + random() % kTokens);
      faults.push_back(parse_fault(fault).value());
    }
    auto session = in_process(model_, faults);
    ASSERT_TRUE(session);
    const auto delay = std::chrono::microseconds(random() % 20000);
    std::thread killer;
    if (faults.empty()) {
      killer = std::thread([&, delay, rank] {
        std::this_thread::sleep_for(delay);
        EXPECT_TRUE(session->stop_rank(rank));
      });
    }
    tally.count(run(*session, model_, tokenizer_, sampled(kTokens)), expected);
    if (killer.joinable()) killer.join();
  }
  tally.print("chaos, 3 in-process ranks");
  EXPECT_EQ(tally.wrong, 0);
  EXPECT_EQ(tally.runs, kRuns);
  EXPECT_GT(tally.heals, 0);
}

// 50 generations on three node processes. During each, one node is killed (kill -9, and started again on its
// address a moment later, as a supervisor would) or frozen (SIGSTOP, then
// SIGCONT up to 2.5 s later).
TEST_F(RemoteHealingTest, ChaosNodesKilledFrozenAndResumed) {
  constexpr int kRuns = 50;
  constexpr int kTokens = 100;
  const auto expected = reference_tokens(model_, tokenizer_, kTokens);
  std::mt19937 random(1717);
  ChaosTally tally;
  int reconnects = 0;
  for (int i = 0; i < kRuns; ++i) {
    DistributedOptions options;
    options.phase_timeout_ms = 2000;
    std::vector<NodeAddress> peers;
    for (int r = 0; r < 3; ++r) peers.push_back(nodes_[static_cast<std::size_t>(r)]->address());
    auto session = DistributedSession::connect(peers, model_, options);
    // Seen in fresh clones' suites on a busy machine: a node that a run
    // before had killed or frozen did not answer within the setup timeout.
    // (The rank it may take afterwards it releases: docs/healing.md.) A
    // supervisor restarts the nodes then, and so does this test; the logs
    // say what the nodes did.
    for (int attempt = 1; !session && attempt <= 2; ++attempt) {
      std::cout << "run " << i << ": connecting failed (" << session.error().message()
                << "), again with restarted nodes\n"
                << node_logs();
      ++reconnects;
      for (auto& node : nodes_) {
        const std::uint16_t port = node->port();
        node->kill_hard();
        node = std::make_unique<NodeProcess>(logs_, test::test_node_options(), port);
      }
      session = DistributedSession::connect(peers, model_, options);
    }
    ASSERT_TRUE(session) << "run " << i << ": " << session.error().message() << "\n" << node_logs();
    const std::size_t victim = random() % 3;
    const bool freeze = random() % 3 == 0;
    const auto delay = std::chrono::milliseconds(random() % 100);
    const auto away = std::chrono::milliseconds(random() % (freeze ? 2500 : 400));
    auto outcome = run_losing(
        **session, kTokens,
        [&] {
          std::this_thread::sleep_for(delay);
          NodeProcess& node = *nodes_[victim];
          if (freeze) {
            node.freeze();
            std::this_thread::sleep_for(away);
            node.resume();
            return;
          }
          const std::uint16_t port = node.port();
          node.kill_hard();
          std::this_thread::sleep_for(away);
          nodes_[victim] = std::make_unique<NodeProcess>(logs_, test::test_node_options(), port);
        },
        6);
    tally.count(outcome, expected);
    if (!outcome) std::cout << "run " << i << " failed: " << outcome.error().message() << "\n";
  }
  tally.print("chaos, 3 node processes");
  std::cout << reconnects << " connection(s) made again\n";
  EXPECT_EQ(tally.wrong, 0);
  EXPECT_EQ(tally.runs, kRuns);
  EXPECT_GT(tally.heals, 0);
}

}  // namespace
}  // namespace accord
