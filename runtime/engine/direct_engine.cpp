#include "runtime/engine/direct_engine.hpp"

#include <deque>

#include "runtime/base/assert.hpp"
#include "runtime/engine/engine_message.hpp"

namespace accord {

namespace {

struct Envelope {
  RankId to = kNoRank;  // kNoRank: the driver
  EngineMessage message;
};

// A phase of `rank` that a `delay` fault holds back until tick `due`.
struct Delayed {
  std::uint64_t due = 0;
  RankId rank = 0;
  Epoch epoch = 0;
};

}  // namespace

struct DirectEngine::State {
  // What one rank sends, into the engine's queue.
  struct Outbox final : RankOutbox {
    Outbox(State& e, RankId r) : engine(e), rank(r) {}
    void to_coordinator(RankReport report) override { engine.post(kNoRank, std::move(report)); }
    void to_rank(RankId to, PeerData data) override { engine.post(to, std::move(data)); }
    void hold_back(Epoch epoch) override {
      // Past the status deadline, within the abort's acknowledgement's.
      engine.delayed.push_back({engine.now + engine.options.agreement.status_deadline_ticks * 3 / 2, rank, epoch});
    }
    void exit() override { engine.driver.rank_down(rank); }

    State& engine;
    RankId rank;
  };

  struct Rank {
    Rank(State& engine, RankId r, std::shared_ptr<RankWorker> worker, const std::vector<Fault>& faults)
        : outbox(engine, r),
          participant(std::move(worker), engine.session, static_cast<RankId>(engine.partition.ranks()), faults, outbox,
                      engine.options.env != nullptr ? *engine.options.env : posix_env()) {}

    Outbox outbox;
    RankParticipant participant;
  };

  State(const Model& m, std::shared_ptr<cpu::ThreadPool> p, const Partition& part, std::string identity, SessionId id,
        DirectEngineOptions o)
      : model(m),
        pool(std::move(p)),
        partition(part),
        model_identity(std::move(identity)),
        session(id),
        options(std::move(o)),
        driver(id, SessionRanks(static_cast<RankId>(part.ranks()), static_cast<RankId>(options.stage.expert_ranks)),
               options.agreement) {
    for (int r = 0; r < partition.ranks(); ++r) ranks.push_back(make_rank(r, options.faults));
  }

  std::unique_ptr<Rank> make_rank(int r, const std::vector<Fault>& faults) {
    auto rank = std::make_unique<Rank>(
        *this, static_cast<RankId>(r),
        std::make_shared<RankWorker>(model, pool, partition, r, model_identity, options.stage), faults);
    rank->participant.lend_observer(observer);
    rank->participant.lend_batcher(batcher);
    rank->participant.set_phase_hook(hook);
    rank->participant.set_phase_timer(timer);
    return rank;
  }

  TransactionReply run(const TransactionRequest& request) {
    if (request.kind() == TransactionKind::reset) restart_exited_ranks();
    if (auto refused = driver.start(request)) return *refused;
    std::optional<TransactionReply> reply;
    DriverReady ready;
    for (;;) {
      driver.take_ready(ready);
      for (auto& m : ready.messages) post(m.to, std::move(m.message));
      if (ready.reply) reply = std::move(ready.reply);
      if (!queue.empty()) {
        Envelope next = std::move(queue.front());
        queue.pop_front();
        deliver(next);
      } else if (reply) {
        return std::move(*reply);
      } else if (driver.agreeing() || !delayed.empty()) {
        pass_time();
      } else {
        return stalled();
      }
    }
  }

  // Nothing to deliver, no deadline running, no reply: a bug of the
  // engine, reported rather than waited on forever.
  static TransactionReply stalled() {
    TransactionReply reply;
    reply.outcome = TransactionOutcome::poisoned;
    reply.poison_cause = "the direct engine stalled: no message, deadline or reply is left";
    reply.message = reply.poison_cause;
    return reply;
  }

  void pass_time() {
    ++now;
    driver.tick();
    std::vector<Delayed> due;
    std::erase_if(delayed, [&](const Delayed& d) {
      if (d.due > now) return false;
      due.push_back(d);
      return true;
    });
    for (const Delayed& d : due) {
      ACCORD_ASSERT(d.rank < ranks.size(), "a held-back phase belongs to a rank of the engine");
      ranks[d.rank]->participant.run_held_back(d.epoch);
    }
  }

  void restart_exited_ranks() {
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      if (!ranks[r]->participant.exited()) continue;
      std::erase_if(delayed, [&](const Delayed& d) { return d.rank == r; });
      // As a distributed session's reset does: a fresh rank, without faults.
      ranks[r] = make_rank(static_cast<int>(r), {});
      driver.rank_up(static_cast<RankId>(r));
    }
  }

  template <class Variant>
  void post(RankId to, Variant message) {
    queue.push_back({to, engine_message(std::move(message))});
  }

  void deliver(Envelope& envelope) {
    accord::deliver(driver, envelope.to, envelope.message, [&](RankId r) -> RankParticipant& {
      ACCORD_ASSERT(r < ranks.size(), "the engine delivers only to its own ranks: rank ids are in range");
      return ranks[r]->participant;
    });
  }

  const Model& model;
  std::shared_ptr<cpu::ThreadPool> pool;
  Partition partition;
  std::string model_identity;
  SessionId session;
  DirectEngineOptions options;
  TransactionDriver driver;
  std::vector<std::unique_ptr<Rank>> ranks;
  std::deque<Envelope> queue;
  std::vector<Delayed> delayed;
  std::shared_ptr<StepObserver> observer;
  StepBatcher* batcher = nullptr;
  PhaseHook hook;
  PhaseTimer timer;
  std::uint64_t now = 0;  // ticks passed
};

DirectEngine::DirectEngine(const Model& model, std::shared_ptr<cpu::ThreadPool> pool, const Partition& partition,
                           const std::string& model_identity, SessionId session, DirectEngineOptions options)
    : state_(std::make_unique<State>(model, std::move(pool), partition, model_identity, session, std::move(options))) {}

DirectEngine::~DirectEngine() = default;

TransactionReply DirectEngine::run(const TransactionRequest& request) { return state_->run(request); }

void DirectEngine::lend_observer(std::shared_ptr<StepObserver> observer) {
  state_->observer = observer;
  for (auto& rank : state_->ranks) rank->participant.lend_observer(observer);
}

void DirectEngine::lend_batcher(StepBatcher* batcher) {
  state_->batcher = batcher;
  for (auto& rank : state_->ranks) rank->participant.lend_batcher(batcher);
}

void DirectEngine::set_phase_hook(PhaseHook hook) {
  state_->hook = hook;
  for (auto& rank : state_->ranks) rank->participant.set_phase_hook(hook);
}

void DirectEngine::set_phase_timer(PhaseTimer timer) {
  state_->timer = timer;
  for (auto& rank : state_->ranks) rank->participant.set_phase_timer(timer);
}

Status DirectEngine::inject_faults(const std::vector<Fault>& plan) {
  if (Status ok = check_fault_plan(plan, ranks(), worker(0).expert_placement().expert_ranks()); !ok) return ok;
  for (auto& rank : state_->ranks) rank->participant.set_faults(plan);
  return {};
}

int DirectEngine::ranks() const { return static_cast<int>(state_->ranks.size()); }

const RankWorker& DirectEngine::worker(int rank) const {
  return state_->ranks.at(static_cast<std::size_t>(rank))->participant.worker();
}

bool DirectEngine::poisoned() const { return state_->driver.agreement().poisoned(); }

}  // namespace accord
