// Remote ranks: three `accord node` processes on loopback, each one rank,
// with the coordinator in the test's process (DistributedSession::connect).
// They give the tokens and logits of in-process ranks bit for bit; a node
// killed with SIGKILL mid-generation poisons the session naming its rank,
// well within the phase deadline, and a frozen one once its heartbeats
// stop; a restarted node on the same address comes back through
// reset; a node stops on SIGTERM, every time, after serving a
// session; a node with another model and bad addresses are refused with
// clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "actors/distributed_session.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/text/sampler.hpp"
#include "tests/node_process.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

using Clock = std::chrono::steady_clock;
using test::NodeProcess;

constexpr int kPhaseTimeoutMs = 2000;

const std::vector<int> kPrompt = {1, 403, 407, 261};

class RemoteClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int r = 0; r < 3; ++r) nodes_.push_back(std::make_unique<NodeProcess>(logs_, node_options()));
    for (const auto& node : nodes_) ASSERT_NE(node->port(), 0);
  }

  // The nodes keep their prompt caches in caches_.
  std::vector<std::string> node_options() const {
    auto options = test::test_node_options();
    options.insert(options.end(), {"--prompt-cache-dir", caches_.path().string()});
    return options;
  }

  std::vector<NodeAddress> peers() const {
    std::vector<NodeAddress> all;
    for (const auto& node : nodes_) all.push_back(node->address());
    return all;
  }

  std::string peer_list() const {
    std::string text;
    for (const auto& node : nodes_) {
      if (!text.empty()) text += ',';
      text += node->address().to_string();
    }
    return text;
  }

  // kill -9 of rank 1's node while the session waits in `phase` for it: a
  // `delay` fault holds rank 1's local work there, and the node dies
  // meanwhile. The step must end poisoned, naming rank 1, well within the
  // deadline (the down message comes before it).
  void expect_poison_from_a_kill_during(const std::string& phase, bool sample) {
    auto session = connect();
    ASSERT_TRUE(session);
    ASSERT_TRUE(session->prefill(kPrompt));
    ASSERT_TRUE(session->inject_faults({parse_fault("1:" + phase + ":delay").value()}));
    std::thread killer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      nodes_[1]->kill_hard();
    });
    const auto start = Clock::now();
    Sampler sampler(SamplerOptions{0.0f, 0.9f, 0});
    auto step = sample ? test::sample_decode(*session, kPrompt.back(), sampler, std::vector<int>{})
                       : session->decode(kPrompt.back());
    const auto took = Clock::now() - start;
    killer.join();
    ASSERT_FALSE(step) << "the step committed without rank 1";
    EXPECT_NE(step.error().message().find("poisoned"), std::string::npos) << step.error().message();
    EXPECT_NE(step.error().message().find("rank 1 is down"), std::string::npos) << step.error().message();
    EXPECT_NE(step.error().message().find(phase), std::string::npos) << step.error().message();
    EXPECT_LT(took, std::chrono::milliseconds(kPhaseTimeoutMs)) << "waited for the deadline, not the down message";
  }

  std::unique_ptr<DistributedSession> connect(std::vector<Fault> faults = {}) {
    DistributedOptions options;
    options.phase_timeout_ms = kPhaseTimeoutMs;
    options.faults = std::move(faults);
    auto session = DistributedSession::connect(peers(), model_, options);
    if (!session) {
      ADD_FAILURE() << session.error().message();
      return nullptr;
    }
    return std::move(*session);
  }

  test::TempDir logs_;
  test::TempDir caches_;
  Model model_ = test::load_stories_model();
  std::vector<std::unique_ptr<NodeProcess>> nodes_;
};

// Logits of the prefill of kPrompt and of `steps` greedy decode steps.
std::vector<float> greedy_trace(DistributedSession& session, int steps) {
  return test::greedy_trace(session, kPrompt, steps);
}

std::vector<float> in_process_trace(const Model& model, int steps) {
  DistributedOptions options;
  options.ranks = 3;
  auto session = DistributedSession::create(model, options);
  EXPECT_TRUE(session) << session.error().message();
  return greedy_trace(**session, steps);
}

TEST_F(RemoteClusterTest, ThreeNodesGiveTheLogitsOfThreeInProcessRanks) {
  auto session = connect();
  ASSERT_TRUE(session);
  EXPECT_EQ(session->ranks(), 3);
  const auto remote = greedy_trace(*session, 20);
  const auto local = in_process_trace(model_, 20);
  ASSERT_EQ(remote.size(), local.size());
  EXPECT_TRUE(test::bit_identical(remote, local));
  auto digests = session->rank_digests();
  ASSERT_TRUE(digests) << digests.error().message();
  EXPECT_EQ(digests->size(), 3u);
}

// A node's snapshot would live in its own process: over nodes snapshots
// and forks are refused, before anything changes; the estimate is read.
TEST_F(RemoteClusterTest, SnapshotsOverNodesAreRefusedAndChangeNothing) {
  auto session = connect();
  ASSERT_TRUE(session);
  ASSERT_TRUE(session->prefill(kPrompt));
  const auto digests = session->rank_digests();
  ASSERT_TRUE(digests);
  auto snapshot = session->snapshot();
  ASSERT_FALSE(snapshot);
  EXPECT_EQ(snapshot.error().code(), ErrorCode::contract);
  EXPECT_TRUE(snapshot.error().before_state_mutation());
  auto estimate = session->estimate_snapshot();
  ASSERT_TRUE(estimate) << estimate.error().message();
  EXPECT_GT(estimate->shared_bytes, 0u);
  EXPECT_EQ(session->rank_digests().value(), *digests);
}

TEST_F(RemoteClusterTest, EachNodeConnectsToTheNodesOfTheRanksAfterItsOwn) {
  auto session = connect();
  ASSERT_TRUE(session);
  ASSERT_TRUE(session->prefill(kPrompt));
  const auto connected = [&](int from, int to) {
    return nodes_[from]->log().find("connected to rank " + std::to_string(to) + "'s node " +
                                    nodes_[to]->address().to_string()) != std::string::npos;
  };
  EXPECT_TRUE(connected(0, 1)) << nodes_[0]->log();
  EXPECT_TRUE(connected(0, 2)) << nodes_[0]->log();
  EXPECT_TRUE(connected(1, 2)) << nodes_[1]->log();
  EXPECT_FALSE(connected(2, 0)) << "each pair of nodes connects once";
  for (const auto& node : nodes_) EXPECT_EQ(node->log().find("cannot connect"), std::string::npos) << node->log();
}

TEST_F(RemoteClusterTest, AClientThatReadsNoWeightsTakesItsIdentityFromTheNodesShards) {
  const Model client = Model::load(test::stories_model(), {WeightScope::nothing(), 1}).value();
  EXPECT_TRUE(client.identity().empty());
  DistributedOptions options;
  options.phase_timeout_ms = kPhaseTimeoutMs;
  auto session = DistributedSession::connect(peers(), client, options);
  ASSERT_TRUE(session) << session.error().message();
  EXPECT_TRUE(test::bit_identical(greedy_trace(**session, 10), in_process_trace(model_, 10)));
  auto report = (*session)->report();
  ASSERT_TRUE(report) << report.error().message();
  EXPECT_EQ(report->model_identity, model_.identity());
  ASSERT_EQ(report->weight_shares.size(), 3u);
  std::uint64_t held = 0;
  for (const WeightShare& share : report->weight_shares) {
    EXPECT_LT(share.bytes, report->weights_bytes) << "a node holds its share only";
    EXPECT_GT(share.resident_bytes, 0u);
    held += share.bytes;
  }
  EXPECT_GE(held, report->weights_bytes);
  EXPECT_EQ(client.resident_bytes(), 0u) << "the client maps no weight";
}

// `accord generate --json` with greedy decoding, 24 tokens of "Once upon a time".
nlohmann::json generate_json(std::vector<std::string> extra) {
  std::vector<std::string> args = {"generate",
                                   "--model",
                                   test::stories_model(),
                                   "--tokenizer",
                                   test::stories_tokenizer(),
                                   "--prompt",
                                   "Once upon a time",
                                   "--temperature",
                                   "0",
                                   "--max-tokens",
                                   "24",
                                   "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto result = test::run_accord(args);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  const auto start = result.output.find('{');
  return nlohmann::json::parse(result.output.substr(start, result.output.find('\n', start) - start));
}

TEST_F(RemoteClusterTest, GenerateWithPeersPrintsTheTokensOfInProcessRanks) {
  const auto remote = generate_json({"--peers", peer_list()});
  const auto local = generate_json({"--ranks", "3"});
  EXPECT_EQ(remote.at("generated_tokens"), local.at("generated_tokens"));
  EXPECT_EQ(remote.at("text"), local.at("text"));
  EXPECT_EQ(remote.at("ranks"), 3);
}

// The nodes load the model with the coordinator's --ctx-size, which the
// identity covers: a node that kept the file's would be refused.
TEST_F(RemoteClusterTest, NodesHoldTheCoordinatorsContext) {
  const auto remote = generate_json({"--peers", peer_list(), "--ctx-size", "40"});
  const auto local = generate_json({"--ranks", "3"});
  EXPECT_EQ(remote.at("generated_tokens"), local.at("generated_tokens"));
}

TEST_F(RemoteClusterTest, SpeculativeDecodingOnTheNodesGivesGreedysTokens) {
  const auto plain = generate_json({"--ranks", "3"});
  const auto remote = generate_json({"--peers", peer_list(), "--speculative", "model:" + test::stories_model()});
  EXPECT_EQ(remote.at("generated_tokens"), plain.at("generated_tokens"));
  // The target as its own draft: every drafted token is kept.
  EXPECT_GT(remote.at("drafted_tokens").get<int>(), 0);
  EXPECT_EQ(remote.at("accepted_tokens"), remote.at("drafted_tokens"));
}

TEST_F(RemoteClusterTest, AKilledNodePoisonsNamingItsRankAndARestartedOneComesBackOnReset) {
  auto session = connect();
  ASSERT_TRUE(session);
  const auto before = greedy_trace(*session, 3);
  // Generate until the kill lands, going back to the prompt before the
  // context runs out.
  auto start = session->checkpoint();
  ASSERT_TRUE(start) << start.error().message();
  std::atomic<bool> killed = false;
  Clock::time_point killed_at;
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    killed_at = Clock::now();
    nodes_[1]->kill_hard();
    killed = true;
  });
  std::optional<Error> failure;
  int token = kPrompt.back();
  const auto give_up = Clock::now() + std::chrono::seconds(30);
  while (!failure && Clock::now() < give_up) {
    if (session->position() + 1 >= model_.config().seq_len) {
      if (Status back = session->rollback(*start); !back) failure = back.error();
      continue;
    }
    auto step = session->decode(token);
    if (!step)
      failure = step.error();
    else
      token = argmax(step->logits);
  }
  const auto failed_at = Clock::now();
  killer.join();
  ASSERT_TRUE(failure) << "generation went on without node 1";
  ASSERT_TRUE(killed);
  EXPECT_NE(failure->message().find("poisoned"), std::string::npos) << failure->message();
  EXPECT_NE(failure->message().find("rank 1 is down"), std::string::npos) << failure->message();
  EXPECT_LT(failed_at - killed_at, std::chrono::milliseconds(kPhaseTimeoutMs) + std::chrono::seconds(2));
  // Refused at once while poisoned, and the reset cannot reach the node.
  EXPECT_FALSE(session->decode(token));
  const auto unreachable = session->reset();
  ASSERT_FALSE(unreachable);
  EXPECT_NE(unreachable.error().message().find(nodes_[1]->address().to_string()), std::string::npos)
      << unreachable.error().message();

  const std::uint16_t port = nodes_[1]->port();
  nodes_[1] = std::make_unique<NodeProcess>(logs_, node_options(), port);
  ASSERT_EQ(nodes_[1]->port(), port);
  const Status reset = session->reset();
  ASSERT_TRUE(reset) << reset.error().message();
  EXPECT_TRUE(test::bit_identical(greedy_trace(*session, 3), before));
}

TEST_F(RemoteClusterTest, AKillDuringExecutionPoisonsAtOnce) { expect_poison_from_a_kill_during("Execution", false); }

TEST_F(RemoteClusterTest, AKillDuringSamplingSynchronizationPoisonsAtOnce) {
  expect_poison_from_a_kill_during("SamplingSynchronization", true);
}

// The fault plan travels to the nodes; an `exit` stops the rank's actors,
// not its node, and the reset assigns the rank to the node again. (The
// exit waits for the second step: a rider of Execution, OutputPublication
// say, would run in the first step before the abort reaches the rank.)
TEST_F(RemoteClusterTest, AFaultPlanRunsOnTheNodes) {
  auto error = parse_fault("1:Execution:error");
  auto exit = parse_fault("2:StateCheckpoint:exit:2");
  ASSERT_TRUE(error && exit);
  auto session = connect({*error, *exit});
  ASSERT_TRUE(session);
  const auto aborted = session->prefill(kPrompt);
  ASSERT_FALSE(aborted);
  EXPECT_NE(aborted.error().message().find("injected fault: error on rank 1 in Execution"), std::string::npos)
      << aborted.error().message();
  const auto poisoned = session->prefill(kPrompt);
  ASSERT_FALSE(poisoned);
  EXPECT_NE(poisoned.error().message().find("rank 2 is down"), std::string::npos) << poisoned.error().message();
  const Status reset = session->reset();
  ASSERT_TRUE(reset) << reset.error().message();
  const auto committed = session->prefill(kPrompt);
  ASSERT_TRUE(committed) << committed.error().message();
  EXPECT_TRUE(test::bit_identical(committed->logits, in_process_trace(model_, 0)));
}

// A frozen node keeps its connection open; only its missing heartbeats
// (use_remote_connections) tell the client that it is gone.
TEST_F(RemoteClusterTest, AFrozenNodeIsDroppedWhenItsHeartbeatsStop) {
  auto session = connect();
  ASSERT_TRUE(session);
  ASSERT_TRUE(session->prefill(kPrompt));
  nodes_[2]->freeze();
  // Idle meanwhile: no phase deadline can notice it.
  std::this_thread::sleep_for(std::chrono::seconds(4));
  const auto started = Clock::now();
  const auto step = session->decode(kPrompt.back());
  ASSERT_FALSE(step);
  EXPECT_LT(Clock::now() - started, std::chrono::milliseconds(500));
  EXPECT_NE(step.error().message().find("rank 2 is down"), std::string::npos) << step.error().message();
}

// A coordinator names the cache; each node keeps it in its own folder.
TEST_F(RemoteClusterTest, APromptCacheSavedOnTheNodesLoadsBackBitForBit) {
  auto session = connect();
  ASSERT_TRUE(session);
  const std::string cache = "stories";
  const std::vector<int> prefix(kPrompt.begin(), kPrompt.end() - 1);
  ASSERT_TRUE(session->prefill(prefix));
  const PromptCacheDescriptor descriptor{"story", "tests"};
  auto saved = session->save_prompt_cache(cache, descriptor, prefix);
  ASSERT_TRUE(saved) << saved.error().message();
  const auto cold = session->decode(kPrompt.back());
  ASSERT_TRUE(cold) << cold.error().message();
  ASSERT_TRUE(session->reset());
  EXPECT_TRUE(std::filesystem::is_directory(caches_.path() / cache));
  const Status loaded = session->load_prompt_cache(cache, descriptor, prefix);
  ASSERT_TRUE(loaded) << loaded.error().message();
  const auto warm = session->decode(kPrompt.back());
  ASSERT_TRUE(warm) << warm.error().message();
  EXPECT_TRUE(test::bit_identical(warm->logits, cold->logits));
}

TEST_F(RemoteClusterTest, ANodeStopsCleanlyOnSigterm) {
  auto session = connect();
  ASSERT_TRUE(session);
  ASSERT_TRUE(session->prefill(kPrompt));
  EXPECT_EQ(nodes_[2]->terminate(std::chrono::seconds(10)), 0) << nodes_[2]->log();
  EXPECT_NE(nodes_[2]->log().find("SIGTERM received"), std::string::npos) << nodes_[2]->log();
}

// A node stops on SIGTERM, even one that has served a session (once it
// did not: ~actor_system waited for a detached actor that the middleman
// still held). Every other node serves one short `generate --peers` and is
// sent SIGTERM right after the client exits, as the hung nodes were; the
// others are sent it while they run a rank of an open session. Every one
// must exit with status 0. The goal is a stop within 2 s; the wait is
// generous so a loaded machine cannot fail the test.
TEST(RemoteCluster, EveryNodeStopsOnSigtermAfterOrDuringASession) {
  constexpr int kNodes = 50;
  constexpr auto kStopWait = std::chrono::seconds(10);
  const Model model = test::load_stories_model();
  test::TempDir logs;
  std::vector<double> stop_ms;
  for (int i = 0; i < kNodes; ++i) {
    NodeProcess node(logs);
    ASSERT_NE(node.port(), 0);
    std::unique_ptr<DistributedSession> open;
    if (i % 2 == 0) {
      const auto served = test::run_accord({"generate", "--model", test::stories_model(), "--tokenizer",
                                            test::stories_tokenizer(), "--prompt", "Once upon a time", "--temperature",
                                            "0", "--max-tokens", "2", "--peers", node.address().to_string()});
      ASSERT_EQ(served.exit_code, 0) << served.output;
    } else {
      auto session = DistributedSession::connect({node.address()}, model, DistributedOptions{});
      ASSERT_TRUE(session) << session.error().message();
      ASSERT_TRUE((*session)->prefill(kPrompt));
      open = std::move(*session);
    }
    const auto start = Clock::now();
    const int status = node.terminate(kStopWait);
    stop_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    ASSERT_EQ(status, 0) << "node " << i << " did not stop cleanly (-1: not within " << kStopWait.count() << " s):\n"
                         << node.log();
  }
  std::sort(stop_ms.begin(), stop_ms.end());
  std::cout << "stop after SIGTERM over " << kNodes << " nodes: median " << stop_ms[stop_ms.size() / 2] << " ms, max "
            << stop_ms.back() << " ms\n";
}

TEST(RemoteCluster, ANodeWithAnotherModelRefusesNamingItself) {
  test::TempDir dir;
  SyntheticModelOptions synthetic;
  synthetic.config = test::small_config();
  test::synthetic_model(dir, synthetic, "other.bin");
  NodeProcess node(dir, {"--model", dir.file("other.bin")});
  ASSERT_NE(node.port(), 0);
  const Model model = test::load_stories_model();
  auto session = DistributedSession::connect({node.address()}, model, DistributedOptions{});
  ASSERT_FALSE(session);
  EXPECT_NE(
      session.error().message().find("node " + node.address().to_string() + " has another model named 'other.bin'"),
      std::string::npos)
      << session.error().message();
}

TEST(RemoteCluster, AnUnreachableNodeIsAClearError) {
  // A port nothing listens on: bound by a node that then stops.
  test::TempDir logs;
  NodeAddress address;
  {
    NodeProcess node(logs);
    address = node.address();
  }
  const Model model = test::load_stories_model();
  auto session = DistributedSession::connect({address}, model, DistributedOptions{});
  ASSERT_FALSE(session);
  EXPECT_NE(session.error().message().find("cannot reach node " + address.to_string() + " (rank 0)"), std::string::npos)
      << session.error().message();
}

TEST(RemoteCluster, BadAddressesAreClearErrors) {
  EXPECT_FALSE(parse_node_address("127.0.0.1"));
  EXPECT_FALSE(parse_node_address(":80"));
  EXPECT_FALSE(parse_node_address("host:http"));
  EXPECT_FALSE(parse_node_address("host:65536"));
  EXPECT_FALSE(parse_node_address("host:0"));
  EXPECT_TRUE(parse_node_address("host:0", true));
  EXPECT_EQ(*parse_peers("a:1,b:2"), (std::vector<NodeAddress>{{"a", 1}, {"b", 2}}));
  EXPECT_FALSE(parse_peers("a:1,,b:2"));

  const auto bad_peers = test::run_accord({"generate", "--model", test::stories_model(), "--peers", "a:1,b"});
  EXPECT_EQ(bad_peers.exit_code, 2) << bad_peers.output;
  EXPECT_NE(bad_peers.output.find("bad node address 'b'"), std::string::npos) << bad_peers.output;
  const auto bad_listen = test::run_accord({"node", "--listen", "127.0.0.1:99999"});
  EXPECT_EQ(bad_listen.exit_code, 1) << bad_listen.output;
  EXPECT_NE(bad_listen.output.find("bad node address '127.0.0.1:99999'"), std::string::npos) << bad_listen.output;
  const auto both = test::run_accord({"generate", "--model", test::stories_model(), "--peers", "a:1", "--ranks", "2"});
  EXPECT_EQ(both.exit_code, 2) << both.output;
}

// A node serves one rank: named twice, its second assignment replaced the
// first and the session failed later, saying rank 0 was down.
TEST(RemoteCluster, ANodeNamedTwiceIsRefusedBeforeConnecting) {
  const std::pair<const char*, const char*> twice[] = {
      {"a:1,b:2,a:1", "the node a:1 is named twice: rank 0 and rank 2; each rank needs a node of its own"},
      {"127.0.0.1:5000,localhost:5000", "rank 0 and rank 1 (as localhost:5000)"},
      {"Node-A:7,node-a:7", "the node Node-A:7 is named twice"},
  };
  for (const auto& [text, why] : twice) {
    auto peers = parse_peers(text);
    ASSERT_FALSE(peers) << text;
    EXPECT_EQ(peers.error().code(), ErrorCode::contract);
    EXPECT_NE(peers.error().message().find(why), std::string::npos) << peers.error().message();
  }
  EXPECT_TRUE(parse_peers("a:1,a:2,b:1"));
  const Model model = test::load_stories_model();
  auto session = DistributedSession::connect({{"127.0.0.1", 1}, {"localhost", 1}}, model, DistributedOptions{});
  ASSERT_FALSE(session);
  EXPECT_NE(session.error().message().find("named twice"), std::string::npos) << session.error().message();
  const auto cli = test::run_accord({"generate", "--model", test::stories_model(), "--peers", "h:1,h:1"});
  EXPECT_EQ(cli.exit_code, 2) << cli.output;
  EXPECT_NE(cli.output.find("--peers: the node h:1 is named twice"), std::string::npos) << cli.output;
}

// A node's own budget wins over the coordinator's, and changes no logit.
TEST(RemoteCluster, ANodesWeightsBudgetLayersItsRankWithTheSameLogits) {
  test::TempDir logs;
  const Model model = test::load_stories_model();
  DistributedOptions options;
  options.max_resident_bytes = 450000;  // the coordinator's, which the second node overrides
  NodeProcess first(logs);
  auto own = test::test_node_options();
  own.insert(own.end(), {"--max-resident-bytes", "400000"});
  NodeProcess second(logs, own);
  auto session = DistributedSession::connect({first.address(), second.address()}, model, options);
  ASSERT_TRUE(session) << session.error().message();
  DistributedOptions in_process;
  in_process.ranks = 2;
  auto resident = DistributedSession::create(model, in_process);
  ASSERT_TRUE(resident) << resident.error().message();
  EXPECT_TRUE(test::bit_identical(greedy_trace(**session, 6), greedy_trace(**resident, 6)));
  auto report = (*session)->report();
  ASSERT_TRUE(report) << report.error().message();
  ASSERT_EQ(report->weight_shares.size(), 2u);
  EXPECT_EQ(report->weight_shares[0].budget_bytes, 450000u);
  EXPECT_EQ(report->weight_shares[1].budget_bytes, 400000u);
  for (const WeightShare& share : report->weight_shares) {
    EXPECT_EQ(share.residency, "layered");
    EXPECT_GT(share.streamed_bytes, 0u);
  }
}

// The coordinator's --threads knows nothing of a node's cores.
TEST(RemoteCluster, ANodeCapsTheThreadsItIsAskedFor) {
  test::TempDir logs;
  NodeProcess node(logs);
  const Model model = test::load_stories_model();
  DistributedOptions options;
  options.threads = cpu::max_useful_threads() + 1;
  auto session = DistributedSession::connect({node.address()}, model, options);
  ASSERT_TRUE(session) << session.error().message();
  EXPECT_FALSE(greedy_trace(**session, 2).empty());
  EXPECT_NE(node.log().find("the coordinator asks for " + std::to_string(options.threads) + " threads, more than " +
                            std::to_string(cpu::kThreadsPerCore) + " per core of this machine; using " +
                            std::to_string(cpu::max_useful_threads())),
            std::string::npos)
      << node.log();
}

}  // namespace
}  // namespace accord
