// The distributed session's protocol seen from outside its actors: messages
// that arrive with a stale epoch or for another session are dropped and
// counted where they arrive, and the session goes on as if they had never
// been sent.
#include <gtest/gtest.h>
#include <caf/all.hpp>

#include "actors/caf_session.hpp"
#include "messages/phase_arguments.hpp"
#include "messages/protocol.hpp"
#include "runtime/text/sampler.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

using enum DistributedExecutionPhase;

std::unique_ptr<DistributedSession> make_session(const Model& model, int ranks) {
  DistributedOptions options;
  options.ranks = ranks;
  auto session = DistributedSession::create(model, options);
  if (!session) ADD_FAILURE() << session.error().message();
  return session ? std::move(*session) : nullptr;
}

// The logits after `prompt` and then `decodes` greedy tokens.
std::vector<float> run_steps(DistributedSession& session, const std::vector<int>& prompt, int decodes) {
  auto step = session.prefill(prompt);
  for (int i = 0; i < decodes && step; ++i) step = session.decode(argmax(step->logits));
  EXPECT_TRUE(step) << step.error().message();
  return step ? step->logits : std::vector<float>{};
}

TEST(DistributedProtocol, StaleAndForeignMessagesAreDroppedAndCounted) {
  const Model model = test::load_stories_model();
  const std::vector<int> prompt = {1, 403, 407};
  auto session = make_session(model, 3);
  ASSERT_TRUE(session);
  run_steps(*session, prompt, 2);  // epochs 1 to 3
  auto checkpoint = session->checkpoint();
  ASSERT_TRUE(checkpoint) << checkpoint.error().message();
  const SessionId id = checkpoint->session_id;
  const auto before = session->dropped_messages();
  ASSERT_TRUE(before) << before.error().message();

  // Each arrives before the next decode's first message at the same actor.
  caf::anon_send(coordinator_of(*session), PhaseStatus{id, 1, phase_id(Execution), 0, true, {}, {}});
  caf::anon_send(rank_actor_of(*session, 1), PhaseBegin{id, 2, phase_id(StateCheckpoint), StepTokens{{5}}, {}});
  caf::anon_send(rank_actor_of(*session, 2),
                 RouteTransfer{id, 1, {1, 2}, WireTensor{{1, model.config().dim}, std::vector<float>(64)}});
  caf::anon_send(rank_actor_of(*session, 0), PhaseBegin{id + 1, 9, phase_id(StateCheckpoint), {}, {}});

  auto step = session->decode(406);
  ASSERT_TRUE(step) << step.error().message();
  const auto after = session->dropped_messages();
  ASSERT_TRUE(after) << after.error().message();

  auto counted = [](const DroppedMessages& now, const DroppedMessages& then, DropReason reason) {
    return now.of(reason) - then.of(reason);
  };
  EXPECT_EQ(counted(after->coordinator, before->coordinator, DropReason::stale_epoch), 1u);
  EXPECT_EQ(counted(after->ranks[1], before->ranks[1], DropReason::stale_epoch), 1u);
  EXPECT_EQ(counted(after->ranks[2], before->ranks[2], DropReason::stale_epoch), 1u);
  EXPECT_EQ(counted(after->ranks[0], before->ranks[0], DropReason::other_session), 1u);
  EXPECT_EQ(after->total().total() - before->total().total(), 4u);

  // Nothing of them reached the state: the same steps on a session that
  // never saw them give the same logits, bit for bit.
  auto untouched = make_session(model, 3);
  ASSERT_TRUE(untouched);
  run_steps(*untouched, prompt, 2);
  auto expected = untouched->decode(406);
  ASSERT_TRUE(expected);
  EXPECT_TRUE(test::bit_identical(step->logits, expected->logits));
}

}  // namespace
}  // namespace accord
