// Slots: `accord node --slots N` processes serve up to N sessions at once.
// Sessions running at the same time on the same nodes each give the logits
// they give alone, bit for bit, over one copy of each node's shard; a
// session past the slots is refused naming the node and --slots while the
// others go on; a session that ends frees its slot for a new one while
// another runs on.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "actors/distributed_session.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/stage_backend.hpp"
#include "runtime/text/sampler.hpp"
#include "tests/node_process.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

using test::NodeProcess;

const std::vector<std::vector<int>> kPrompts = {{1, 403, 407, 261}, {1, 500, 42}, {1, 7, 300, 301, 302}};
constexpr int kSteps = 6;

std::vector<std::string> slots(int n) {
  auto options = test::test_node_options();
  options.insert(options.end(), {"--slots", std::to_string(n)});
  return options;
}

std::vector<NodeAddress> addresses(const std::vector<std::unique_ptr<NodeProcess>>& nodes) {
  std::vector<NodeAddress> all;
  for (const auto& node : nodes) all.push_back(node->address());
  return all;
}

// How many times `text` holds `part`.
int count(const std::string& text, const std::string& part) {
  int found = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++found;
  return found;
}

class NodeSlots : public ::testing::Test {
 protected:
  void start_nodes(int count, int slot_count, const std::vector<std::string>& more = {}) {
    std::vector<std::string> options = slots(slot_count);
    options.insert(options.end(), more.begin(), more.end());
    for (int i = 0; i < count; ++i) nodes_.push_back(std::make_unique<NodeProcess>(logs_, options));
    for (const auto& node : nodes_) ASSERT_NE(node->port(), 0) << node->log();
  }

  Result<std::unique_ptr<DistributedSession>> connect() {
    return DistributedSession::connect(addresses(nodes_), model_, DistributedOptions{});
  }

  // A session on the nodes; none, and a failure, when the nodes refuse it.
  std::unique_ptr<DistributedSession> connected() {
    auto session = connect();
    if (!session) {
      ADD_FAILURE() << session.error().message();
      return nullptr;
    }
    return std::move(*session);
  }

  // What `prompt` gives on in-process ranks as many as the nodes, alone.
  std::vector<float> alone(const std::vector<int>& prompt, int steps = kSteps) {
    DistributedOptions options;
    options.ranks = static_cast<int>(nodes_.size());
    auto session = DistributedSession::create(model_, options);
    EXPECT_TRUE(session) << session.error().message();
    return session ? test::greedy_trace(**session, prompt, steps) : std::vector<float>{};
  }

  test::TempDir logs_;
  Model model_ = test::load_stories_model();
  std::vector<std::unique_ptr<NodeProcess>> nodes_;
};

// Greedy steps of one session, taken a few at a time.
class GreedyRun {
 public:
  explicit GreedyRun(DistributedSession& session) : session_(session) {}

  void prefill(const std::vector<int>& prompt) { take(session_.prefill(prompt)); }
  void decode(int steps) {
    for (int i = 0; i < steps && ok_; ++i) take(session_.decode(argmax(last_)));
  }
  const std::vector<float>& trace() const { return trace_; }

 private:
  void take(Result<DistributedStep> step) {
    ok_ = static_cast<bool>(step);
    ASSERT_TRUE(step) << step.error().message();
    last_ = step->logits;
    trace_.insert(trace_.end(), last_.begin(), last_.end());
  }

  DistributedSession& session_;
  bool ok_ = true;
  std::vector<float> last_;
  std::vector<float> trace_;
};

TEST_F(NodeSlots, SessionsRunningAtOnceOnTheSameNodesGiveWhatEachGivesAlone) {
  start_nodes(3, 3);
  std::vector<std::unique_ptr<DistributedSession>> sessions;
  for (std::size_t i = 0; i < kPrompts.size(); ++i) {
    sessions.push_back(connected());
    ASSERT_TRUE(sessions.back());
  }
  std::vector<std::vector<float>> traces(kPrompts.size());
  std::vector<std::thread> running;
  for (std::size_t i = 0; i < kPrompts.size(); ++i) {
    running.emplace_back([&, i] { traces[i] = test::greedy_trace(*sessions[i], kPrompts[i], kSteps); });
  }
  for (auto& thread : running) thread.join();
  for (std::size_t i = 0; i < kPrompts.size(); ++i) {
    EXPECT_TRUE(test::bit_identical(traces[i], alone(kPrompts[i]))) << "session " << i;
  }
  // One copy of each node's shard: read for the first session, shared by the others.
  for (std::size_t r = 0; r < nodes_.size(); ++r) {
    EXPECT_EQ(count(nodes_[r]->log(), "read rank " + std::to_string(r) + "'s shard"), 1) << nodes_[r]->log();
  }
}

TEST_F(NodeSlots, ASessionPastTheSlotsIsRefusedNamingTheNodeAndTheOthersGoOn) {
  start_nodes(1, 2);
  auto first = connected();
  auto second = connected();
  ASSERT_TRUE(first && second);
  const auto third = connect();
  ASSERT_FALSE(third);
  const std::string& why = third.error().message();
  EXPECT_NE(why.find("node " + nodes_[0]->address().to_string()), std::string::npos) << why;
  EXPECT_NE(why.find("as many as its --slots"), std::string::npos) << why;
  EXPECT_TRUE(test::bit_identical(test::greedy_trace(*first, kPrompts[0], kSteps), alone(kPrompts[0])));
  EXPECT_TRUE(test::bit_identical(test::greedy_trace(*second, kPrompts[1], kSteps), alone(kPrompts[1])));
}

TEST_F(NodeSlots, AnEndedSessionFreesItsSlotWhileAnotherRunsOn) {
  start_nodes(1, 2);
  auto staying = connected();
  auto leaving = connected();
  ASSERT_TRUE(staying && leaving);
  GreedyRun run(*staying);
  run.prefill(kPrompts[0]);
  run.decode(2);
  leaving.reset();          // its coordinator goes, and with it its slot on the node
  auto next = connected();  // asks again until the node sees that coordinator gone
  ASSERT_TRUE(next);
  run.decode(kSteps - 2);
  EXPECT_TRUE(test::bit_identical(run.trace(), alone(kPrompts[0])));
  EXPECT_TRUE(test::bit_identical(test::greedy_trace(*next, kPrompts[2], kSteps), alone(kPrompts[2])));
}

// --kv-budget-bytes: the node's sessions share one KV pool. With room for
// one block, a second session's step aborts (the session stays usable);
// once the first session ends and gives its block back, it runs and gives
// what it gives alone.
TEST_F(NodeSlots, SessionsShareTheNodesKvBudgetAndAFullPoolAbortsAStepOnly) {
  const auto block = std::to_string(KvCache::kBlockPositions * kv_position_bytes(model_.config(), KvType::f32));
  start_nodes(1, 2, {"--kv-budget-bytes", block});
  auto first = connected();
  auto second = connected();
  ASSERT_TRUE(first && second);
  ASSERT_TRUE(first->prefill(kPrompts[0]));
  auto refused = second->prefill(kPrompts[1]);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("KV pool's budget of " + block + " bytes"), std::string::npos)
      << refused.error().message();
  EXPECT_EQ(second->position(), 0);
  first.reset();  // its rank, and the block it held, go with its coordinator
  EXPECT_TRUE(test::eventually([&] { return static_cast<bool>(second->prefill(kPrompts[1])); }));
  ASSERT_TRUE(second->reset());
  EXPECT_TRUE(test::bit_identical(test::greedy_trace(*second, kPrompts[1], kSteps), alone(kPrompts[1])));
}

}  // namespace
}  // namespace accord
