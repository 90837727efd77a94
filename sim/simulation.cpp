#include "sim/simulation.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <optional>

#include "runtime/agreement/transaction_plan.hpp"
#include "runtime/engine/direct_engine.hpp"
#include "runtime/engine/session_requests.hpp"
#include "runtime/io/digest.hpp"
#include "runtime/rank/prompt_cache.hpp"
#include "runtime/rank/prompt_cache_recovery.hpp"
#include "runtime/rank/snapshot_shelf.hpp"
#include "sim/cluster.hpp"

namespace accord::sim {

namespace {

enum class Operation {
  prefill,
  decode,
  speculative,
  checkpoint,
  rollback,
  reset,
  save,
  load,
  snapshot,
  restore,
  recover,
};
constexpr int kDrawnOperations = 10;  // all but recover
constexpr std::size_t kKeptSnapshots = 4;

const char* const kCacheRoot = "/cache";
const PromptCacheDescriptor kCacheDescriptor{"sim", "sim"};

const char* name_of(Operation op) {
  switch (op) {
    case Operation::prefill: return "prefill";
    case Operation::decode: return "decode";
    case Operation::speculative: return "speculative";
    case Operation::checkpoint: return "checkpoint";
    case Operation::rollback: return "rollback";
    case Operation::reset: return "reset";
    case Operation::save: return "save";
    case Operation::load: return "load";
    case Operation::snapshot: return "snapshot";
    case Operation::restore: return "restore";
    case Operation::recover: return "recover";
  }
  return "?";
}

const char* name_of(TransactionOutcome outcome) {
  switch (outcome) {
    case TransactionOutcome::committed: return "committed";
    case TransactionOutcome::refused: return "refused";
    case TransactionOutcome::aborted: return "aborted";
    case TransactionOutcome::poisoned: return "poisoned";
  }
  return "?";
}

// 0 with probability `calm`, else uniform in [low, high].
double sometimes(Random& random, double calm, double low, double high) {
  if (random.chance(calm)) return 0;
  return low + (high - low) * static_cast<double>(random.below(1001)) / 1000.0;
}

Weather draw_weather(Random& random) {
  Weather w;
  w.tick_chance = sometimes(random, 0.5, 0.005, 0.08);
  w.delay_chance = sometimes(random, 0.5, 0.05, 0.3);
  w.max_delay_ticks = random.between(1, 12);
  w.duplicate_chance = sometimes(random, 0.5, 0.01, 0.2);
  w.loss_chance = sometimes(random, 0.75, 0.0005, 0.004);
  w.crash_chance = sometimes(random, 0.75, 0.0005, 0.004);
  w.power_loss_chance = sometimes(random, 0.9, 0.0005, 0.002);
  w.disk_fault_chance = sometimes(random, 0.75, 0.002, 0.03);
  w.detect_ticks = random.between(0, 6);
  return w;
}

bool is_expert_route(const PhaseId& phase) { return phase.route.kind == RouteKind::experts; }

// The phases of a step over expert routes (none unless experts spread).
std::vector<PhaseId> expert_route_phases(SessionRanks ranks) {
  ForwardStepRequest step;
  step.tokens = {3};
  std::vector<PhaseId> routes = phases_of(TransactionRequest{step}, ranks);
  std::erase_if(routes, [](const PhaseId& phase) { return !is_expert_route(phase); });
  return routes;
}

// Up to three faults of any kind on any rank and phase; where experts
// spread, half of them on one expert route's phase, at one of its ends
// (a stage that sent some units' rows, a helper that served some).
std::vector<Fault> draw_faults(Random& random, SessionRanks ranks) {
  std::vector<Fault> plan;
  if (random.chance(0.5)) return plan;
  const std::vector<PhaseId> routes = expert_route_phases(ranks);
  const int count = random.between(1, 3);
  for (int i = 0; i < count; ++i) {
    Fault fault;
    fault.rank = static_cast<RankId>(random.below(ranks.ranks));
    fault.phase = static_cast<DistributedExecutionPhase>(random.below(kDistributedExecutionPhaseCount));
    fault.kind = static_cast<FaultKind>(random.below(6));
    fault.occurrence = static_cast<std::uint32_t>(random.between(1, 4));
    if (!routes.empty() && random.chance(0.5)) {
      const PhaseId& route = routes[random.below(routes.size())];
      fault.phase = route.phase;
      fault.route = route.route;
      fault.rank = random.chance(0.5) ? route.route.source : route.route.target;
    }
    plan.push_back(fault);
  }
  if (!check_fault_plan(plan, static_cast<int>(ranks.ranks), static_cast<int>(ranks.expert_ranks))) plan.clear();
  return plan;
}

// Whether the seed runs the routed model, and its experts over how many of
// the ranks: drawn from a stream of their own, so that a dense seed draws
// every other choice as it did before routed models were drawn.
struct Shape {
  bool routed = false;
  int expert_ranks = 1;
};

Shape draw_shape(std::uint64_t seed, int ranks) {
  Random random(seed ^ 0x5EEDE4BE2700ull);
  Shape shape;
  shape.routed = random.chance(0.5);
  if (shape.routed) shape.expert_ranks = random.between(1, ranks);
  return shape;
}

// Everything of a rank's state that a later step or rollback can see:
// the committed position and epoch, and the keys and values of every row
// ever written (a rollback forward reuses rows past the position). The
// session's own digest covers the rows up to the position only.
std::string whole_state(const SessionState& state) {
  const KvStore& kv = state.kv();
  FastDigest d;
  for (int u = kv.first_unit(); u < kv.first_unit() + kv.unit_count(); ++u) {
    kv.view_rows(u, 0, state.high_water(), [&](std::span<const float> keys, std::span<const float> values) {
      d.update(keys.data(), keys.size_bytes()).update(values.data(), values.size_bytes());
    });
  }
  d.update_value(state.position()).update_value(state.state_epoch()).update_value(state.high_water());
  if (!state.tokens().empty()) d.update(state.tokens().data(), state.tokens().size_bytes());
  return d.hex();
}

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp may not be handed the null data of an empty vector.
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

class Run {
 public:
  // `dense` and `routed` have the same units (so the same rank counts).
  Run(std::uint64_t seed, const SimModel& dense, const SimModel& routed, bool trace)
      : random_(seed),
        ranks_(random_.between(1, std::min(4, dense.model.config().n_layers))),
        shape_(draw_shape(seed, ranks_)),
        model_(shape_.routed ? routed : dense),
        session_ranks_(static_cast<RankId>(ranks_), static_cast<RankId>(shape_.expert_ranks)),
        faults_(draw_faults(random_, session_ranks_)),
        weather_(draw_weather(random_)),
        cluster_(model_.model, pool(), session_ranks_, model_.identity, faults_, weather_, disk_, random_),
        reference_(model_.model, pool(), Partition::balanced(model_.model.config().n_layers, 1).value(),
                   model_.identity, 7, DirectEngineOptions{{}, {}, &reference_disk_}),
        trace_(trace) {
    report_.seed = seed;
    disk_.set_fault_hook([this](std::string_view, const std::filesystem::path&) {
      return disk_faults_ && random_.chance(weather_.disk_fault_chance);
    });
  }

  SeedReport go() {
    if (trace_) {
      std::string line = std::to_string(ranks_) + " rank(s), ";
      if (shape_.routed) {
        line += std::to_string(config().n_experts) + " experts (top " + std::to_string(config().n_experts_used) +
                ") over " + std::to_string(shape_.expert_ranks) + " rank(s), faults:";
      } else {
        line += "dense, faults:";
      }
      for (const Fault& fault : faults_) line.append(" ").append(to_string(fault));
      if (faults_.empty()) line.append(" none");
      report_.trace.push_back(std::move(line));
    }
    const int operations = random_.between(6, 24);
    for (operation_ = 0; operation_ < operations && report_.violations.empty(); ++operation_) perform(draw());
    report_.operations = operation_;
    report_.crashes = cluster_.crashes();
    report_.cuts = cluster_.cuts();
    report_.power_losses = cluster_.power_losses();
    report_.expert_transfers = cluster_.expert_transfers();
    return std::move(report_);
  }

 private:
  // The checkpoints both sides took at the same committed operation.
  struct Checkpoint {
    RankCheckpointReport cluster;
    RankCheckpointReport reference;
  };
  // A snapshot each side took at the same operation (each under its own
  // id, on the process's shelf), kept by its holds, and each cluster
  // rank's content digest once it committed.
  struct Snapshot {
    std::uint64_t cluster = 0;
    std::uint64_t reference = 0;
    std::array<std::shared_ptr<const void>, 2> holds;
    std::vector<std::string> digests;
  };

  static std::shared_ptr<cpu::ThreadPool> pool() {
    static const auto one_thread = std::make_shared<cpu::ThreadPool>(1);
    return one_thread;
  }

  const ModelConfig& config() const { return model_.model.config(); }
  int position() const { return reference_.worker(0).position(); }
  int room() const { return config().seq_len - position(); }

  Operation draw() {
    if ((cluster_.poisoned() || cluster_.any_rank_lost()) && random_.chance(0.6)) return Operation::recover;
    for (;;) {
      const auto op = static_cast<Operation>(random_.below(kDrawnOperations));
      if (op == Operation::rollback && checkpoints_.empty()) continue;
      if (op == Operation::restore && snapshots_.empty()) continue;
      if (op == Operation::save && position() == 0) continue;
      if (op == Operation::load && !saved_prefix_) continue;
      if ((op == Operation::prefill && room() < 9) || (op != Operation::prefill && room() < 5)) {
        return Operation::reset;
      }
      return op;
    }
  }

  // Any token but the three specials.
  int token() { return random_.between(3, config().vocab_size - 1); }
  std::vector<int> tokens(int count) {
    std::vector<int> out;
    for (int i = 0; i < count; ++i) out.push_back(token());
    return out;
  }

  // The operation's request for each side (they differ only in a rollback's
  // target: each side's own checkpoint).
  std::pair<TransactionRequest, TransactionRequest> requests(Operation op) {
    TransactionRequest request;
    switch (op) {
      case Operation::prefill: request = step_request(tokens(random_.between(1, 8)), random_.chance(0.3)); break;
      case Operation::decode: {
        // Now and then the step the last one chained; the reference, one
        // rank, runs each step as asked.
        if (chained_ && random_.chance(0.5)) {
          request = *chained_;
        } else {
          request = step_request(tokens(1), false);
          SamplingArguments sampling;
          sampling.temperature = random_.chance(0.5) ? 0.0f : 0.8f;
          sampling.rng_state = random_.next();
          std::get<ForwardStepRequest>(request.operation).sampling = sampling;
        }
        std::get<ForwardStepRequest>(request.operation).chain_next = random_.chance(0.5);
        TransactionRequest reference_request = request;
        std::get<ForwardStepRequest>(reference_request.operation).chain_next = false;
        return {request, reference_request};
      }
      case Operation::speculative: {
        const int draft = random_.between(1, 3);
        request = step_request(tokens(draft + 1), true, draft);
        break;
      }
      case Operation::checkpoint: request = {CheckpointRequest{}}; break;
      case Operation::rollback: {
        const Checkpoint& cp = checkpoints_[random_.below(checkpoints_.size())];
        return {rollback_request(cp.cluster.position, cp.cluster.state_epoch, cp.cluster.reset_epoch),
                rollback_request(cp.reference.position, cp.reference.state_epoch, cp.reference.reset_epoch)};
      }
      case Operation::snapshot: {
        Snapshot& taken = snapshot_taken_.emplace();
        taken.cluster = SnapshotShelf::new_id();
        taken.reference = SnapshotShelf::new_id();
        taken.holds = {SnapshotShelf::process().hold(taken.cluster), SnapshotShelf::process().hold(taken.reference)};
        return {{SnapshotRequest{taken.cluster}}, {SnapshotRequest{taken.reference}}};
      }
      case Operation::restore: {
        restored_ = random_.below(snapshots_.size());
        const Snapshot& back = snapshots_[restored_];
        return {{SnapshotRestoreRequest{back.cluster}}, {SnapshotRestoreRequest{back.reference}}};
      }
      case Operation::reset:
      case Operation::recover: request = {ResetRequest{}}; break;
      case Operation::save: {
        const auto tokens = reference_.worker(0).state().tokens();
        request = cache_request(TransactionKind::prompt_cache_save, kCacheRoot, kCacheDescriptor,
                                tokens.first(static_cast<std::size_t>(random_.between(1, position()))), "");
        std::get<PromptCacheSaveRequest>(request.operation).arguments.save_id = save_id();
        break;
      }
      case Operation::load: {
        // Now and then a prefix the cache does not hold: it must be refused.
        const std::vector<int> prefix = random_.chance(0.8) ? *saved_prefix_ : tokens(random_.between(1, 4));
        request = cache_request(TransactionKind::prompt_cache_load, kCacheRoot, kCacheDescriptor, prefix, "");
        break;
      }
    }
    return {request, request};
  }

  std::string save_id() {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string id(16, '0');
    for (char& c : id) c = kDigits[random_.below(16)];
    return id;
  }

  // Repairs the cache after a poison, as an operator would once a reset
  // brought every rank back (a rank holds its open save's lock till then).
  void repair_cache() {
    disk_faults_ = false;
    auto recovered = recover_prompt_cache(kCacheRoot, disk_);
    disk_faults_ = true;
    if (!recovered) return violation("the prompt cache cannot be recovered: " + recovered.error().message());
    // After a committed reset no rank holds a save open, nor its lock.
    if (recovered->action == RecoveryAction::busy) {
      return violation("a reset left the cache locked: " + recovered->reason);
    }
    cache_repaired_ = true;
    if (trace_ && !recovered->reason.empty()) report_.trace.push_back("recovery: " + recovered->reason);
  }

  void perform(Operation op) {
    if (op == Operation::recover) cluster_.restart_lost_ranks();
    const auto [request, reference_request] = requests(op);
    const bool was_poisoned = cluster_.poisoned();
    const auto before = digests();
    const auto reply = cluster_.run(request);
    if (!reply) return violation(std::string(name_of(op)) + " never ended: nothing to deliver, no deadline, no reply");
    chained_ = chained_step(request, *reply);
    const bool routed = !was_poisoned && count_routed(request, *reply);
    if (trace_) {
      report_.trace.push_back(std::to_string(operation_) + " " + name_of(op) + (routed ? " over experts" : "") + ": " +
                              name_of(reply->outcome) + (reply->message.empty() ? "" : " (" + reply->message + ")"));
    }
    check_deadline(request, *reply);
    switch (reply->outcome) {
      case TransactionOutcome::committed:
        ++report_.committed;
        if (was_poisoned && request.kind() != TransactionKind::reset) violation("a poisoned session committed");
        check_committed(op, *reply, reference_request);
        break;
      case TransactionOutcome::aborted:
      case TransactionOutcome::refused:
        ++report_.aborted;
        check_unchanged(before, "an aborted or refused transaction changed rank ");
        break;
      case TransactionOutcome::poisoned:
        ++report_.poisoned;
        if (was_poisoned) check_unchanged(before, "a poisoned session changed rank ");
        if (!cluster_.poisoned()) violation("the transaction was poisoned but the session is not");
        // A save cut short may leave the ranks on different
        // generations (a load refuses them): recovery repairs that, but
        // which one is live is no longer known.
        if (op == Operation::save) {
          saved_prefix_.reset();
          cache_repaired_ = false;
        }
        break;
    }
    if (op == Operation::recover && reply->outcome == TransactionOutcome::committed) repair_cache();
    snapshot_taken_.reset();  // one that did not commit is dropped with its holds
    check_snapshots_stable();
    check_last_save_live();
    if (cache_repaired_ && !cluster_.poisoned() && !cluster_.any_rank_lost()) check_cache_whole_or_invisible();
  }

  // Every rank's CURRENT names the same generation, whole and intact, or
  // no rank has one. (A `corrupt` fault damages a shard on purpose: its
  // checksum is then not checked here; the load refuses it.)
  void check_cache_whole_or_invisible() {
    disk_faults_ = false;
    std::optional<std::string> first;
    for (int r = 0; r < cluster_.ranks(); ++r) {
      auto current = read_current(rank_folder(kCacheRoot, r), disk_);
      if (!current) {
        violation("rank " + std::to_string(r) + "'s CURRENT cannot be read: " + current.error().message());
        break;
      }
      const std::string name = current->value_or("");
      if (r > 0 && name != first) {
        violation("ranks 0 and " + std::to_string(r) + " name different generations");
        break;
      }
      first = name;
      if (name.empty()) continue;
      auto live = read_live_generation(kCacheRoot, r, disk_);
      if (!live || (!corrupting() && !read_shard(*live))) {
        violation("rank " + std::to_string(r) + "'s live generation " + name + " is not whole");
        break;
      }
    }
    disk_faults_ = true;
  }

  // The last committed save stays live through aborted saves, failing
  // disks and power losses: it was synced before it committed. (Unless a
  // `corrupt` fault damaged it: recovery may then drop it.)
  void check_last_save_live() {
    if (!saved_prefix_ || corrupting()) return;
    disk_faults_ = false;
    auto live = read_live_generation(kCacheRoot, 0, disk_);
    disk_faults_ = true;
    if (!live) return violation("the last committed save is gone: " + live.error().message());
    if (live->manifest.prefix_token_count != static_cast<int>(saved_prefix_->size())) {
      violation("the live generation is not the last committed save");
    }
  }

  bool corrupting() const {
    return std::any_of(faults_.begin(), faults_.end(), [](const Fault& f) { return f.kind == FaultKind::corrupt; });
  }

  // Counts a transaction that ran over expert routes (was not refused, nor
  // stopped by a poison it met); whether it did.
  bool count_routed(const TransactionRequest& request, const TransactionReply& reply) {
    if (reply.outcome == TransactionOutcome::refused) return false;
    const auto phases = phases_of(request, session_ranks_);
    if (std::none_of(phases.begin(), phases.end(), is_expert_route)) return false;
    ++report_.routed_steps;
    if (reply.outcome == TransactionOutcome::committed) ++report_.routed_committed;
    if (reply.outcome == TransactionOutcome::aborted) ++report_.routed_aborted;
    if (reply.outcome == TransactionOutcome::poisoned) ++report_.routed_poisoned;
    return true;
  }

  // Every phase decides within its status deadline, an abort within its
  // acknowledgement's: a transaction takes no more ticks than that.
  void check_deadline(const TransactionRequest& request, const TransactionReply& reply) {
    if (reply.outcome == TransactionOutcome::refused) return;
    const AgreementOptions deadlines;
    const auto phases = phases_of(request, session_ranks_).size();
    const std::uint64_t bound = phases * deadlines.status_deadline_ticks + deadlines.acknowledgement_deadline_ticks;
    if (cluster_.ticks_taken() > bound) {
      violation("took " + std::to_string(cluster_.ticks_taken()) + " ticks, past its deadlines' " +
                std::to_string(bound));
    }
  }

  void check_committed(Operation op, const TransactionReply& reply, const TransactionRequest& reference_request) {
    const TransactionReply expected = reference_.run(reference_request);
    if (expected.outcome != TransactionOutcome::committed) {
      return violation("committed on " + std::to_string(cluster_.ranks()) + " ranks, but " + name_of(expected.outcome) +
                       " on one: " + expected.message);
    }
    if (!same_floats(reply.logits.data, expected.logits.data)) violation("logits differ from one rank's");
    if (reply.sampled.token != expected.sampled.token) violation("the sampled token differs from one rank's");
    const auto& p = reply.prediction_target;
    const auto& q = expected.prediction_target;
    if (p.kept_rows != q.kept_rows || p.accepted != q.accepted || p.next_token != q.next_token ||
        !same_floats(p.hidden.data, q.hidden.data)) {
      violation("the prediction-target verdict differs from one rank's");
    }
    if (op == Operation::checkpoint) keep_checkpoint(reply, expected);
    if (op == Operation::snapshot) keep_snapshot();
    if (op == Operation::restore) check_restored(snapshots_[restored_]);
    if (op == Operation::save) {
      const auto& prefix = std::get<PromptCacheSaveRequest>(reference_request.operation).arguments.prefix;
      saved_prefix_ = std::vector<int>(prefix.begin(), prefix.end());
      cache_repaired_ = true;  // every rank switched to it
    }
    check_ranks_agree();
  }

  void keep_checkpoint(const TransactionReply& reply, const TransactionReply& expected) {
    if (reply.checkpoints.size() != static_cast<std::size_t>(cluster_.ranks()) || expected.checkpoints.size() != 1) {
      return violation("a checkpoint without one report per rank");
    }
    for (const auto& cp : reply.checkpoints) {
      if (cp.position != expected.checkpoints[0].position) violation("a rank checkpointed another position");
    }
    checkpoints_.push_back({reply.checkpoints[0], expected.checkpoints[0]});
  }

  // Each rank's image of the snapshot on the shelf, digested; empty where
  // a rank holds none.
  std::vector<std::string> shelved_digests(std::uint64_t id) const {
    std::vector<std::string> out;
    for (int r = 0; r < cluster_.ranks(); ++r) {
      auto image = SnapshotShelf::process().find(id, static_cast<RankId>(r));
      out.push_back(image ? SessionState::content_digest(image->image) : "");
    }
    return out;
  }

  void keep_snapshot() {
    Snapshot taken = std::move(*snapshot_taken_);
    snapshot_taken_.reset();
    taken.digests = shelved_digests(taken.cluster);
    for (int r = 0; r < cluster_.ranks(); ++r) {
      if (cluster_.live(r) &&
          taken.digests[static_cast<std::size_t>(r)] != cluster_.participant(r).worker().state().content_digest()) {
        violation("rank " + std::to_string(r) + "'s snapshot is not its state");
      }
    }
    if (snapshots_.size() == kKeptSnapshots) snapshots_.erase(snapshots_.begin());
    snapshots_.push_back(std::move(taken));
  }

  void check_restored(const Snapshot& snapshot) {
    for (int r = 0; r < cluster_.ranks(); ++r) {
      if (cluster_.live(r) &&
          snapshot.digests[static_cast<std::size_t>(r)] != cluster_.participant(r).worker().state().content_digest()) {
        violation("rank " + std::to_string(r) + " restored a snapshot into another state");
      }
    }
  }

  // A snapshot stays as it was taken however its descendants advance.
  void check_snapshots_stable() {
    for (const Snapshot& kept : snapshots_) {
      const std::vector<std::string> now = shelved_digests(kept.cluster);
      for (std::size_t r = 0; r < now.size(); ++r) {
        if (now[r] == kept.digests[r]) continue;
        violation("rank " + std::to_string(r) + "'s image of a snapshot " + (now[r].empty() ? "went" : "changed") +
                  " after it was taken");
        return;
      }
    }
  }

  // After a commit every live rank holds the reference's tokens and the
  // same state epoch.
  void check_ranks_agree() {
    const auto& tokens = reference_.worker(0).state().tokens();
    std::optional<std::uint64_t> epoch;
    for (int r = 0; r < cluster_.ranks(); ++r) {
      if (!cluster_.live(r)) continue;
      const RankStateReport state = cluster_.participant(r).state_report();
      if (state.position != position()) {
        violation("rank " + std::to_string(r) + " is at position " + std::to_string(state.position) + ", one rank at " +
                  std::to_string(position()));
      }
      const auto& held = cluster_.participant(r).worker().state().tokens();
      if (!std::equal(tokens.begin(), tokens.begin() + position(), held.begin())) {
        violation("rank " + std::to_string(r) + " holds other tokens than one rank");
      }
      if (epoch && *epoch != state.state_epoch) violation("live ranks hold different state epochs after a commit");
      epoch = state.state_epoch;
    }
  }

  std::vector<std::optional<std::string>> digests() const {
    std::vector<std::optional<std::string>> out;
    for (int r = 0; r < cluster_.ranks(); ++r) {
      out.push_back(cluster_.live(r) ? std::optional(whole_state(cluster_.participant(r).worker().state()))
                                     : std::nullopt);
    }
    return out;
  }

  void check_unchanged(const std::vector<std::optional<std::string>>& before, const std::string& what) {
    const auto after = digests();
    for (std::size_t r = 0; r < after.size(); ++r) {
      if (before[r] && after[r] && before[r] != after[r]) violation(what + std::to_string(r) + "'s state");
    }
  }

  void violation(const std::string& what) {
    report_.violations.push_back("operation " + std::to_string(operation_) + ": " + what);
  }

  Random random_;
  int ranks_;
  Shape shape_;
  const SimModel& model_;
  SessionRanks session_ranks_;
  std::vector<Fault> faults_;
  Weather weather_;
  MemEnv disk_;            // the cluster's machine's
  MemEnv reference_disk_;  // the reference's, without faults
  bool disk_faults_ = true;
  Cluster cluster_;
  DirectEngine reference_;
  bool trace_;
  std::vector<Checkpoint> checkpoints_;
  std::vector<Snapshot> snapshots_;               // committed, the oldest first
  std::optional<Snapshot> snapshot_taken_;        // the snapshot operation's, until it ends
  std::size_t restored_ = 0;                      // the restore operation's snapshot
  std::optional<std::vector<int>> saved_prefix_;  // of the last committed save, while known
  std::optional<TransactionRequest> chained_;     // the step the last one chained, begun and held
  bool cache_repaired_ = true;                    // false from a poisoned save to the next recovery
  int operation_ = 0;
  SeedReport report_;
};

}  // namespace

SeedReport run_seed(std::uint64_t seed, const SimModel& dense, const SimModel& routed, bool trace) {
  return Run(seed, dense, routed, trace).go();
}

}  // namespace accord::sim
