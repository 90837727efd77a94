// The node actor in process (actors/node.hpp), asked as a coordinator
// would: it loads only files of its model folder by plain name, drops a
// refused model and the model of the session before, refuses fault plans
// it was not allowed and sessions past its --slots, and frees exactly the
// slot of a session that ends (released, or its coordinator gone) while
// the others run on.
#include <gtest/gtest.h>
#include <caf/all.hpp>

#include <chrono>
#include <filesystem>
#include <thread>

#include "actors/atoms.hpp"
#include "actors/caf_session.hpp"
#include "actors/node.hpp"
#include "messages/node_api.hpp"
#include "runtime/fault/fault_plan.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

// Generous: these bound waits for things that happen in milliseconds.
constexpr auto kPatience = std::chrono::seconds(20);

class NodeConfig : public caf::actor_system_config {
 public:
  NodeConfig() { register_distributed_session_types(*this); }
};

// A coordinator that takes every message and answers none. It is spawned
// with an argument it ignores: CAF 0.17.6 dereferences a null tuple for a
// function spawned without one (init_fun_factory.hpp), which UBSan reports.
caf::behavior silent_coordinator(int) {
  return {[](caf::message&) {}};
}

// A node actor in this process, asked as a coordinator would.
class NodeActorTest : public ::testing::Test {
 protected:
  NodeActorTest() : system_(config_), self_(system_) {}

  void start(NodeOptions options) {
    options.name = "node under test";
    node_ = spawn_node(system_, std::move(options));
  }

  CoordinatorActor coordinator() { return caf::actor_cast<CoordinatorActor>(system_.spawn(silent_coordinator, 0)); }

  // The node's options: serve the models of models_.
  NodeOptions folder_options() const { return NodeOptions{{}, {}, models_.path(), std::nullopt, false}; }

  // A small synthetic model written into models_ as `name`.
  Model small_model(const std::string& name, std::uint64_t seed = 1) const {
    SyntheticModelOptions synthetic;
    synthetic.config = test::small_config();
    synthetic.seed = seed;
    return test::synthetic_model(models_, synthetic, name);
  }

  NodeAssignment assignment_for(const Model& model, std::uint64_t session = 1) const {
    NodeAssignment assignment;
    assignment.session = session;
    assignment.unit_counts = {model.config().n_layers};
    assignment.model_name = std::filesystem::path(model.path()).filename().string();
    assignment.model_identity = model.identity();
    assignment.tensor_digests = model.tensor_digests();
    return assignment;
  }

  // The node's refusal; code none when it started the rank.
  NodeRefusal refusal_of(const NodeAssignment& assignment, const CoordinatorActor& from) {
    NodeRefusal refusal{NodeRefusalCode::none, "no answer"};
    self_->request(node_, kPatience, assign_atom::value, assignment, from)
        .receive([&](NodeRefusal& answer, RankActor&) { refusal = std::move(answer); },
                 [&](caf::error& e) { refusal.message = system_.render(e); });
    return refusal;
  }

  // The rank the node started for `assignment`; none when it refused.
  RankActor rank_of(const NodeAssignment& assignment, const CoordinatorActor& from) {
    RankActor started;
    self_->request(node_, kPatience, assign_atom::value, assignment, from)
        .receive([&](NodeRefusal&, RankActor& rank) { started = std::move(rank); }, [](caf::error&) {});
    return started;
  }

  // Whether `rank` still runs: it answers a request for its state.
  bool runs(const RankActor& rank) {
    bool answered = false;
    self_->request(rank, kPatience, rank_state_atom::value)
        .receive([&](RankStateReport&) { answered = true; }, [](caf::error&) {});
    return answered;
  }

  // Why the node refused; empty when it started the rank.
  std::string assign(const NodeAssignment& assignment, const CoordinatorActor& from) {
    return refusal_of(assignment, from).message;
  }

  ~NodeActorTest() override { caf::anon_send_exit(node_, caf::exit_reason::user_shutdown); }

  NodeConfig config_;
  caf::actor_system system_;
  caf::scoped_actor self_;
  NodeActor node_;
  test::TempDir models_;
};

TEST_F(NodeActorTest, LoadsOnlyPlainNamesOfItsModelFolder) {
  start(folder_options());
  const Model model = small_model("small.bin");
  const auto from = coordinator();
  for (const std::string& path : std::vector<std::string>{"../small.bin", "/etc/passwd", models_.file("small.bin")}) {
    NodeAssignment assignment = assignment_for(model);
    assignment.model_name = path;
    EXPECT_NE(assign(assignment, from).find("must be a plain name"), std::string::npos) << path;
  }
  NodeAssignment missing = assignment_for(model);
  missing.model_name = "absent.bin";
  const std::string refusal = assign(missing, from);
  EXPECT_NE(refusal.find("cannot load 'absent.bin' from its model directory"), std::string::npos) << refusal;
  EXPECT_EQ(refusal.find(models_.path().string()), std::string::npos) << "names the node's folder: " << refusal;
  EXPECT_EQ(assign(assignment_for(model), from), "");
}

TEST_F(NodeActorTest, ServesSuccessiveModelsAndKeepsNoRefusedOne) {
  start(folder_options());
  const Model first = small_model("first.bin");
  const Model second = small_model("second.bin", 2);
  ASSERT_NE(first.identity(), second.identity());
  // A name whose file is another model than the session's: refused, and the
  // node holds nothing that would refuse the next session.
  NodeAssignment wrong = assignment_for(first);
  wrong.model_name = "second.bin";
  const NodeRefusal another = refusal_of(wrong, coordinator());
  EXPECT_EQ(another.code, NodeRefusalCode::model_refused);
  EXPECT_NE(another.message.find("has another model named 'second.bin'"), std::string::npos);
  auto owner = coordinator();
  EXPECT_EQ(assign(assignment_for(first, 1), owner), "");
  // The first session's coordinator goes; the next session brings its model.
  caf::anon_send_exit(owner, caf::exit_reason::user_shutdown);
  auto next = coordinator();
  std::string refusal;
  ASSERT_TRUE(test::eventually([&] {
    refusal = assign(assignment_for(second, 2), next);
    return refusal.empty();
  })) << refusal;
}

TEST_F(NodeActorTest, ARunningSessionsRankIsNotTakenOver) {
  start(folder_options());
  const Model model = small_model("small.bin");
  auto owner = coordinator();
  EXPECT_EQ(assign(assignment_for(model, 1), owner), "");
  const NodeRefusal taken = refusal_of(assignment_for(model, 2), coordinator());
  EXPECT_EQ(taken.code, NodeRefusalCode::rank_taken) << taken.message;
  EXPECT_NE(taken.message.find("node under test runs 1 session(s), as many as its --slots"), std::string::npos)
      << taken.message;
  // Its own coordinator assigns it again (a reset); once it is gone, anyone may.
  EXPECT_EQ(assign(assignment_for(model, 1), owner), "");
  caf::anon_send_exit(owner, caf::exit_reason::user_shutdown);
  auto next = coordinator();
  EXPECT_TRUE(test::eventually([&] { return assign(assignment_for(model, 3), next).empty(); }));
}

// A coordinator that gave up on a node's answer tells it so, naming its
// session; the node lets the rank go though that coordinator still runs
// (its session went on with a spare), and only for that session.
TEST_F(NodeActorTest, ARankIsReleasedWhenItsSessionGivesUpOnTheNode) {
  start(folder_options());
  const Model model = small_model("small.bin");
  auto owner = coordinator();
  ASSERT_EQ(assign(assignment_for(model, 1), owner), "");
  auto next = coordinator();
  self_->send(node_, release_atom::value, std::uint64_t{2});
  EXPECT_EQ(refusal_of(assignment_for(model, 2), next).code, NodeRefusalCode::rank_taken)
      << "a release naming another session freed the rank";
  self_->send(node_, release_atom::value, std::uint64_t{1});
  EXPECT_EQ(assign(assignment_for(model, 2), next), "") << "the session's release did not free the rank";
  caf::anon_send_exit(owner, caf::exit_reason::user_shutdown);
}

// A node's --ctx-size bounds the keys and values a session may make it hold.
TEST_F(NodeActorTest, ASessionAskingForMorePositionsThanTheNodeHoldsIsRefused) {
  NodeOptions options = folder_options();
  options.max_context = 64;
  start(options);
  const Model model = small_model("small.bin");
  NodeAssignment assignment = assignment_for(model);
  assignment.context = 65;
  const NodeRefusal refusal = refusal_of(assignment, coordinator());
  EXPECT_EQ(refusal.code, NodeRefusalCode::invalid_assignment);
  EXPECT_NE(refusal.message.find("holds at most 64 positions a session (its --ctx-size); the session asks for 65"),
            std::string::npos)
      << refusal.message;
  assignment.context = 64;
  EXPECT_EQ(assign(assignment, coordinator()), "");
}

TEST_F(NodeActorTest, FaultPlansNeedAllowFaults) {
  start(folder_options());
  const Model model = small_model("small.bin");
  NodeAssignment assignment = assignment_for(model);
  assignment.faults = {parse_fault("0:Execution:exit").value()};
  const NodeRefusal refusal = refusal_of(assignment, coordinator());
  EXPECT_EQ(refusal.code, NodeRefusalCode::faults_not_allowed);
  EXPECT_NE(refusal.message.find("does not take fault plans (start it with --allow-faults)"), std::string::npos);
}

// Slots: sessions up to --slots run at once on one node, each its own rank;
// one past them is refused naming the node and --slots, and the others run on.
TEST_F(NodeActorTest, SessionsUpToItsSlotsRunAtOnceAndOnePastIsRefused) {
  NodeOptions options = folder_options();
  options.slots = 2;
  start(options);
  const Model model = small_model("small.bin");
  const auto first = rank_of(assignment_for(model, 1), coordinator());
  const auto second = rank_of(assignment_for(model, 2), coordinator());
  ASSERT_TRUE(first && second);
  EXPECT_NE(first, second);
  const NodeRefusal past = refusal_of(assignment_for(model, 3), coordinator());
  EXPECT_EQ(past.code, NodeRefusalCode::rank_taken) << past.message;
  EXPECT_NE(past.message.find("node under test runs 2 session(s), as many as its --slots"), std::string::npos)
      << past.message;
  EXPECT_TRUE(runs(first));
  EXPECT_TRUE(runs(second));
}

// A session's release frees its slot and stops its rank only; a release
// naming no session of the node frees nothing.
TEST_F(NodeActorTest, AReleasedSessionFreesItsOwnSlotOnly) {
  NodeOptions options = folder_options();
  options.slots = 2;
  start(options);
  const Model model = small_model("small.bin");
  const auto first = rank_of(assignment_for(model, 1), coordinator());
  const auto second = rank_of(assignment_for(model, 2), coordinator());
  ASSERT_TRUE(first && second);
  self_->send(node_, release_atom::value, std::uint64_t{7});
  EXPECT_EQ(refusal_of(assignment_for(model, 3), coordinator()).code, NodeRefusalCode::rank_taken);
  self_->send(node_, release_atom::value, std::uint64_t{1});
  EXPECT_EQ(assign(assignment_for(model, 3), coordinator()), "");
  EXPECT_TRUE(test::eventually([&] { return !runs(first); })) << "the released session's rank still runs";
  EXPECT_TRUE(runs(second));
  EXPECT_EQ(refusal_of(assignment_for(model, 4), coordinator()).code, NodeRefusalCode::rank_taken);
}

// A coordinator that goes takes its session's slot; the other session runs on.
TEST_F(NodeActorTest, AGoneCoordinatorFreesItsSessionsSlotOnly) {
  NodeOptions options = folder_options();
  options.slots = 2;
  start(options);
  const Model model = small_model("small.bin");
  auto leaving = coordinator();
  const auto first = rank_of(assignment_for(model, 1), leaving);
  const auto second = rank_of(assignment_for(model, 2), coordinator());
  ASSERT_TRUE(first && second);
  caf::anon_send_exit(leaving, caf::exit_reason::user_shutdown);
  const auto next = coordinator();
  EXPECT_TRUE(test::eventually([&] { return assign(assignment_for(model, 3), next).empty(); }));
  EXPECT_TRUE(test::eventually([&] { return !runs(first); })) << "the gone coordinator's rank still runs";
  EXPECT_TRUE(runs(second));
}

}  // namespace
}  // namespace accord
