#include "sim/cluster.hpp"

namespace accord::sim {

namespace {

constexpr SessionId kSession = 7;
// A run that has not ended after this many events hangs.
constexpr std::uint64_t kMaxEvents = 1'000'000;

}  // namespace

// What one rank sends, onto the simulated network.
class Cluster::Outbox final : public RankOutbox {
 public:
  Outbox(Cluster& cluster, RankId rank) : cluster_(cluster), rank_(rank) {}
  void to_coordinator(RankReport report) override { cluster_.send(rank_, kCoordinator, engine_message(report)); }
  void to_rank(RankId to, PeerData data) override { cluster_.send(rank_, to, engine_message(data)); }
  void hold_back(Epoch epoch) override;
  void exit() override { cluster_.lose(rank_, true); }

 private:
  Cluster& cluster_;
  RankId rank_;
};

struct Cluster::Rank {
  Rank(Cluster& cluster, RankId r) : outbox(cluster, r) {}

  Outbox outbox;
  std::unique_ptr<RankParticipant> participant;
  bool crashed = false;                                 // the process died (an exit fault, or a crash)
  bool cut = false;                                     // a link broke: nothing reaches it or leaves it
  std::optional<std::uint64_t> notice_at;               // when the coordinator sees it gone
  std::optional<std::pair<std::uint64_t, Epoch>> held;  // a delay fault's work: due tick, epoch
};

// As the direct engine does: past the status deadline, within the abort's
// acknowledgement's.
void Cluster::Outbox::hold_back(Epoch epoch) {
  const std::uint64_t wait = AgreementOptions{}.status_deadline_ticks * 3 / 2;
  cluster_.ranks_[rank_]->held = {cluster_.now_ + wait, epoch};
}

Cluster::Cluster(const Model& model, std::shared_ptr<cpu::ThreadPool> pool, SessionRanks ranks,
                 const std::string& model_identity, std::vector<Fault> faults, Weather weather, MemEnv& disk,
                 Random& random)
    : model_(model),
      pool_(std::move(pool)),
      partition_(Partition::balanced(model.config().n_layers, static_cast<int>(ranks.ranks)).value()),
      model_identity_(model_identity),
      weather_(weather),
      disk_(disk),
      random_(random),
      driver_(kSession, ranks) {
  stage_.expert_ranks = static_cast<int>(ranks.expert_ranks);
  // Every rank first: make_participant tells each participant the rank count, ranks().
  for (RankId r = 0; r < ranks.ranks; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
  for (std::size_t r = 0; r < ranks_.size(); ++r)
    ranks_[r]->participant = make_participant(*ranks_[r], static_cast<int>(r), faults);
}

Cluster::~Cluster() = default;

std::unique_ptr<RankParticipant> Cluster::make_participant(Rank& rank, int r, const std::vector<Fault>& faults) {
  auto worker = std::make_shared<RankWorker>(model_, pool_, partition_, r, model_identity_, stage_);
  return std::make_unique<RankParticipant>(std::move(worker), kSession, static_cast<RankId>(ranks()), faults,
                                           rank.outbox, disk_);
}

namespace {

constexpr Epoch kEveryEpoch = ~Epoch{0};

Epoch epoch_of(const EngineMessage& message) {
  return std::visit([](const auto& m) { return m.epoch; }, message);
}

}  // namespace

std::optional<TransactionReply> Cluster::run(const TransactionRequest& request) {
  const std::uint64_t start = now_;
  ticks_taken_ = 0;
  if (auto refused = driver_.start(request)) return refused;
  std::optional<TransactionReply> reply;
  for (std::uint64_t events = 0; events < kMaxEvents; ++events) {
    DriverReady ready = driver_.take_ready();
    for (auto& m : ready.messages) send(kCoordinator, m.to, engine_message(std::move(m.message)));
    if (ready.reply) {
      reply = std::move(ready.reply);
      ticks_taken_ = now_ - start;
    }
    const Epoch settling = reply && driver_.chained() ? reply->epoch : kEveryEpoch;
    if (reply && settled(settling)) return reply;
    if (!step(settling)) return reply;
  }
  return std::nullopt;
}

bool Cluster::settled(Epoch up_to) const {
  for (const auto& [link, queue] : links_) {
    if (!queue.empty() && epoch_of(queue.front().message) <= up_to) return false;
  }
  for (const auto& rank : ranks_) {
    if (rank->notice_at || rank->held) return false;
  }
  return true;
}

bool Cluster::step(Epoch up_to) {
  std::vector<Link> ready;  // links whose first message may arrive now
  for (const auto& [link, queue] : links_) {
    if (!queue.empty() && queue.front().arrives_at <= now_ && epoch_of(queue.front().message) <= up_to) {
      ready.push_back(link);
    }
  }
  if (!ready.empty() && !random_.chance(weather_.tick_chance)) {
    if (random_.chance(weather_.crash_chance)) {
      lose(static_cast<RankId>(random_.below(ranks_.size())), true);
    } else if (random_.chance(weather_.power_loss_chance)) {
      lose_power();
    } else {
      deliver_one(ready[random_.below(ready.size())]);
    }
    return true;
  }
  if (settled(up_to) && !driver_.agreeing()) return false;
  pass_time();
  return true;
}

// Delivers the first message of `link`.
void Cluster::deliver_one(const Link& link) {
  auto& queue = links_.at(link);
  EngineMessage message = std::move(queue.front().message);
  queue.pop_front();
  if (std::holds_alternative<ExpertTransfer>(message)) ++expert_transfers_;
  accord::deliver(driver_, link.second, message, [&](RankId r) -> RankParticipant& { return *ranks_[r]->participant; });
}

void Cluster::pass_time() {
  ++now_;
  driver_.tick();
  for (std::size_t r = 0; r < ranks_.size(); ++r) {
    Rank& rank = *ranks_[r];
    if (rank.notice_at && *rank.notice_at <= now_) {
      rank.notice_at.reset();
      driver_.rank_down(static_cast<RankId>(r));
    }
    if (rank.held && rank.held->first <= now_) {
      const Epoch epoch = rank.held->second;
      rank.held.reset();
      if (!rank.crashed) rank.participant->run_held_back(epoch);
    }
  }
}

void Cluster::send(RankId from, RankId to, EngineMessage message) {
  const auto lost = [&](RankId r) { return r != kCoordinator && !live(static_cast<int>(r)); };
  if (lost(from) || lost(to)) return;
  if (random_.chance(weather_.loss_chance)) return lose(to == kCoordinator ? from : to, false);
  std::uint64_t arrives_at = now_;
  if (random_.chance(weather_.delay_chance)) {
    arrives_at += static_cast<std::uint64_t>(random_.between(1, weather_.max_delay_ticks));
  }
  auto& queue = links_[{from, to}];
  if (random_.chance(weather_.duplicate_chance)) queue.push_back({arrives_at, message});
  queue.push_back({arrives_at, std::move(message)});
}

// The rank's process dies (crash) or its links break (cut): what is in
// flight to or from it is gone, and the coordinator notices later.
void Cluster::lose(RankId r, bool crash) {
  Rank& rank = *ranks_[r];
  if (!live(static_cast<int>(r))) return;
  if (crash) {
    rank.crashed = true;
    rank.held.reset();
    ++crashes_;
  } else {
    rank.cut = true;
    ++cuts_;
  }
  forget_links_of(r);
  rank.notice_at = now_ + static_cast<std::uint64_t>(random_.between(0, weather_.detect_ticks));
}

// The machine goes down: every rank's process dies and the disk keeps only
// what was synced.
void Cluster::lose_power() {
  ++power_losses_;
  for (std::size_t r = 0; r < ranks_.size(); ++r) lose(static_cast<RankId>(r), true);
  disk_.crash();
}

void Cluster::forget_links_of(RankId r) {
  for (auto& [link, queue] : links_) {
    if (link.first == r || link.second == r) queue.clear();
  }
}

void Cluster::restart_lost_ranks() {
  for (std::size_t r = 0; r < ranks_.size(); ++r) {
    Rank& rank = *ranks_[r];
    if (live(static_cast<int>(r))) continue;
    if (rank.notice_at) driver_.rank_down(static_cast<RankId>(r));
    rank.notice_at.reset();
    if (rank.crashed) rank.participant = make_participant(rank, static_cast<int>(r), {});
    rank.crashed = false;
    rank.cut = false;
    driver_.rank_up(static_cast<RankId>(r));
  }
}

bool Cluster::any_rank_lost() const {
  for (int r = 0; r < ranks(); ++r) {
    if (!live(r)) return true;
  }
  return false;
}

const RankParticipant& Cluster::participant(int r) const {
  return *ranks_.at(static_cast<std::size_t>(r))->participant;
}

bool Cluster::live(int r) const {
  const Rank& rank = *ranks_.at(static_cast<std::size_t>(r));
  return !rank.crashed && !rank.cut;
}

}  // namespace accord::sim
