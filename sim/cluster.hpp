// The engine's coordinator and ranks on a simulated network and clock
// (docs/simulation.md): the TransactionDriver and every rank's RankParticipant in
// one thread, as the direct engine runs them, but one seed decides which
// message goes next, how long it waits, whether it is duplicated or lost,
// when time passes and when a rank crashes or is cut off.
//
// The network keeps the order of each link (one sender, one receiver), as
// TCP and CAF do, and reorders across links. A lost message breaks its
// link, as a broken connection does: the rank at its end is cut off, and
// the coordinator learns it is down some ticks later (its heartbeat).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/agreement/transaction_plan.hpp"
#include "runtime/engine/engine_message.hpp"
#include "runtime/io/mem_env.hpp"
#include "runtime/model/model.hpp"
#include "runtime/rank/partition.hpp"
#include "sim/random.hpp"

namespace accord::sim {

// How hostile a run's network and ranks are; drawn from the seed.
struct Weather {
  double tick_chance = 0;   // time passes before a delivery, though one is ready
  double delay_chance = 0;  // a message waits some ticks before it can arrive
  int max_delay_ticks = 0;
  double duplicate_chance = 0;   // a message arrives twice, one after the other
  double loss_chance = 0;        // a message is lost and its link breaks
  double crash_chance = 0;       // a rank's process dies before a delivery
  double power_loss_chance = 0;  // every rank dies and the disk loses what was not synced
  double disk_fault_chance = 0;  // a file operation fails
  int detect_ticks = 1;          // until the coordinator sees a lost rank
};

class Cluster {
 public:
  // The ranks share `disk` (one machine's), which must outlive the cluster.
  // A routed model's experts spread over `expert_ranks` of the ranks
  // (runtime/rank/expert_placement.hpp); 1: each stage holds its own.
  Cluster(const Model& model, std::shared_ptr<cpu::ThreadPool> pool, SessionRanks ranks,
          const std::string& model_identity, std::vector<Fault> faults, Weather weather, MemEnv& disk, Random& random);
  ~Cluster();

  // Runs one transaction to its reply, then lets the network settle: every
  // message in flight arrives or is lost, and every lost rank is noticed.
  // A chained step the reply began (TransactionRequest::chain_next) waits
  // undelivered for the next run, whose request takes or withdraws it.
  // A run that can never end (nothing to deliver, no deadline running, no
  // reply) returns nullopt.
  std::optional<TransactionReply> run(const TransactionRequest& request);
  // Ticks the last run took until its reply.
  std::uint64_t ticks_taken() const { return ticks_taken_; }

  // Brings every crashed rank back as a fresh process without faults, and
  // every cut-off rank back on its link (with the state it kept), and
  // tells the coordinator they are up.
  void restart_lost_ranks();
  bool any_rank_lost() const;

  int ranks() const { return static_cast<int>(ranks_.size()); }
  // Whether rank r's process runs and is reachable.
  bool live(int r) const;
  const RankParticipant& participant(int r) const;
  bool poisoned() const { return driver_.agreement().poisoned(); }
  std::uint64_t crashes() const { return crashes_; }
  std::uint64_t cuts() const { return cuts_; }
  std::uint64_t power_losses() const { return power_losses_; }
  // Expert rows (ExpertTransfer) handed to a rank: dispatches and outputs.
  std::uint64_t expert_transfers() const { return expert_transfers_; }

 private:
  static constexpr RankId kCoordinator = kNoRank;
  using Link = std::pair<RankId, RankId>;  // sender, receiver
  struct InFlight {
    std::uint64_t arrives_at = 0;
    EngineMessage message;
  };
  struct Rank;
  class Outbox;

  void send(RankId from, RankId to, EngineMessage message);
  // Nothing of transaction `up_to` or earlier is in flight.
  bool settled(Epoch up_to) const;
  // One event: a delivery (of transaction `up_to` or earlier), a crash, or a tick.
  bool step(Epoch up_to);
  void deliver_one(const Link& link);
  void pass_time();
  void lose(RankId rank, bool crash);
  void lose_power();
  void forget_links_of(RankId rank);
  std::unique_ptr<RankParticipant> make_participant(Rank& rank, int r, const std::vector<Fault>& faults);

  const Model& model_;
  std::shared_ptr<cpu::ThreadPool> pool_;
  Partition partition_;
  StageOptions stage_;
  std::string model_identity_;
  Weather weather_;
  MemEnv& disk_;
  Random& random_;
  TransactionDriver driver_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::map<Link, std::deque<InFlight>> links_;
  std::uint64_t now_ = 0;
  std::uint64_t ticks_taken_ = 0;
  std::uint64_t crashes_ = 0;
  std::uint64_t cuts_ = 0;
  std::uint64_t power_losses_ = 0;
  std::uint64_t expert_transfers_ = 0;
};

}  // namespace accord::sim
