#include "actors/distributed_session.hpp"
#include "actors/distributed_session_actor.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <random>
#include <thread>

#include "actors/atoms.hpp"
#include "actors/coordinator.hpp"
#include "runtime/agreement/transaction_plan.hpp"
#include "runtime/engine/session_requests.hpp"
#include "runtime/engine/transaction_driver.hpp"
#include "actors/message_registry.hpp"
#include "actors/node_port.hpp"
#include "actors/rank_actors.hpp"
#include "messages/node_api.hpp"
#include "messages/session_api.hpp"
#include "runtime/io/digest.hpp"
#include "runtime/model/identity.hpp"
#include "runtime/model/residency.hpp"
#include "runtime/model/transformer.hpp"
#include "runtime/rank/partition.hpp"
#include "runtime/rank/rank_worker.hpp"

namespace accord {

namespace {

class SessionConfig : public caf::actor_system_config {
 public:
  explicit SessionConfig(bool remote) {
    register_distributed_session_types(*this);
    use_low_latency_scheduling(*this);
    if (remote) use_remote_connections(*this);
  }
};

// How long a node may take to load the model, hash it and spawn its rank.
constexpr std::chrono::seconds kNodeSetupTimeout{60};
// How long connecting to a node and both handshakes may take.
constexpr std::chrono::seconds kConnectTimeout{10};
// How long a node may still see a coordinator that went away: the
// connection timeout of use_remote_connections, and a margin.
constexpr std::chrono::seconds kTakenRankPatience{3};

std::string describe_node(const NodeAddress& node, int rank) {
  return "node " + node.to_string() + " (rank " + std::to_string(rank) + ")";
}

// Lends a step's observer to every in-process rank for one call, and takes
// it back. The lend reaches each rank's mailbox before the coordinator
// receives the request, and so before any begin of the step; the return
// after the reply, before any begin of the next.
class ObserverLoan {
 public:
  ObserverLoan(const caf::scoped_actor& caller, const std::vector<RankActor>& ranks,
               std::shared_ptr<StepObserver> observer)
      : caller_(caller), ranks_(observer ? &ranks : nullptr) {
    lend(std::move(observer));
  }
  ~ObserverLoan() { lend(nullptr); }
  ObserverLoan(const ObserverLoan&) = delete;
  ObserverLoan& operator=(const ObserverLoan&) = delete;

 private:
  void lend(std::shared_ptr<StepObserver> observer) {
    if (ranks_ == nullptr) return;
    for (const auto& rank : *ranks_) caller_->send(rank, LentObserver{observer});
  }

  const caf::scoped_actor& caller_;
  const std::vector<RankActor>* ranks_;
};

SamplingArguments sampling_arguments(const Sampler& sampler, std::span<const int> stop_tokens) {
  return {sampler.options().temperature, sampler.options().top_p, sampler.rng_state(),
          std::vector<std::int32_t>(stop_tokens.begin(), stop_tokens.end())};
}

std::uint64_t random_session_id() {
  std::random_device random;
  return (static_cast<std::uint64_t>(random()) << 32) | random();
}

}  // namespace

void register_distributed_session_types(caf::actor_system_config& config) { register_message_types(config); }

void use_low_latency_scheduling(caf::actor_system_config& config) {
  // CAF 0.17's idle worker first spins (aggressive), then polls with a
  // 50 us sleep between attempts for about 25 ms (moderate), then waits on
  // a condition variable that an arriving message notifies (relaxed). A
  // decode step leaves the workers idle for milliseconds while a rank
  // computes, so every phase round after it paid up to a sleep period per
  // hop. Without the moderate stage a message wakes a worker at once.
  config.set("work-stealing.moderate-poll-attempts", std::size_t{0});
}

void use_remote_connections(caf::actor_system_config& config) {
  config.load<caf::io::middleman>();
  // CAF 0.17 starts max(cores, 4) workers. A node's rank computes on one
  // (its pool's threads are not CAF's) and its other actors need one more;
  // a client's coordinator needs one. The rest only wake up and take cores
  // from the node that computes: with two, three nodes on two cores switch
  // threads a fifth less often and decode about 5% faster
  // (docs/perf-log.md, "Eleventh pass").
  config.set("scheduler.max-threads", std::size_t{2});
  config.set("middleman.heartbeat-interval", caf::timespan{std::chrono::milliseconds(250)});
  config.set("middleman.connection-timeout", caf::timespan{std::chrono::seconds(2)});
}

struct DistributedSession::Impl {
  std::unique_ptr<SessionConfig> own_config;
  std::unique_ptr<caf::actor_system> own_system;
  caf::actor_system* system = nullptr;
  const Model* model = nullptr;
  SessionId session_id = random_session_id();
  std::vector<RankActor> ranks;  // every rank's actor, in rank order (a remote one's proxy)
  std::shared_ptr<cpu::ThreadPool> pool;             // shared by the in-process ranks
  std::vector<NodeAddress> nodes;  // rank r runs on nodes[r]; empty: every rank in process
  std::optional<Secret> secret;    // what connect() proves to the nodes
  std::vector<NodeAddress> spares;  // connect()'s, not yet taken
  // The prompt cache last saved or loaded, which heal() loads again.
  struct CacheMark {
    std::filesystem::path root;
    PromptCacheDescriptor descriptor;
    std::vector<int> prefix;
    std::string prepared_input;
  };
  std::optional<CacheMark> cache_mark;
  CoordinatorActor coordinator;
  // The caller's side of every transaction, made once: creating a scoped
  // actor per call costs a registration and a teardown each time.
  std::optional<caf::scoped_actor> caller;
  // What a rank is made of, to start one again after it exited.
  struct RankLayout {
    Partition partition;
    int threads = 1;
    std::string identity;
    std::vector<std::string> tensor_digests;  // the model's, in canonical order (identity.hpp)
    RankOptions options;
  };
  std::optional<RankLayout> layout;
  // The committed tokens of every rank, and the prepared input behind them:
  // the handle keeps them so it can describe the committed prompt.
  std::vector<int> tokens;
  PreparedInputRecord prepared;
  DistributedStats stats;
  TransactionRecord record;
  // The step the coordinator began on its own after the last commit (a
  // chained step), and when that commit's reply came.
  std::optional<TransactionRequest> chained;
  std::chrono::steady_clock::time_point chained_since;

  ~Impl() {
    if (system == nullptr) return;
    // Stop every actor and wait for the local ones, so no rank touches the
    // model after the session is gone. A remote rank is not waited for: its
    // node stops it when the coordinator goes, and an unreachable node must
    // not hold the caller up.
    caf::scoped_actor self{*system};
    std::vector<caf::actor> local = {caf::actor_cast<caf::actor>(coordinator)};
    for (const auto& rank : ranks) {
      if (nodes.empty()) {
        local.push_back(caf::actor_cast<caf::actor>(rank));
      } else if (rank) {
        self->send_exit(rank, caf::exit_reason::user_shutdown);
      }
    }
    for (const auto& actor : local) self->send_exit(actor, caf::exit_reason::user_shutdown);
    self->wait_for(local);
  }

  Status start(const Model& m, const DistributedOptions& options) {
    model = &m;
    const int units = m.config().n_layers;
    const int rank_count = nodes.empty() ? options.ranks : static_cast<int>(nodes.size());
    auto partition = options.unit_counts.empty() ? Partition::by_weight(m, rank_count)
                                                 : Partition::from_counts(units, options.unit_counts);
    if (!partition) return partition.error();
    if (options.threads < 1) return Error(ErrorCode::contract, "a session needs at least one thread");
    if (options.phase_timeout_ms < 1) return Error(ErrorCode::contract, "the phase timeout must be positive");
    RankOptions rank_options;
    rank_options.phase_timeout = std::chrono::milliseconds(options.phase_timeout_ms);
    rank_options.faults = options.faults;
    rank_options.stage = {options.backend, options.max_resident_bytes};
    if (Status ok = check_fault_plan(rank_options.faults, partition->ranks()); !ok) return ok;
    if (Status ok = check_local_residency(*partition, options.max_resident_bytes); !ok) return ok;
    if (Status ok = check_local_backend(options.backend); !ok) return ok;
    const auto coordination = CoordinatorOptions::for_phase_timeout(std::chrono::milliseconds(options.phase_timeout_ms));
    coordinator = spawn_coordinator(*system, session_id, static_cast<RankId>(partition->ranks()), coordination);
    layout.emplace(RankLayout{*partition, options.threads, model_identity(m), m.tensor_digests(),
                              std::move(rank_options)});
    if (nodes.empty()) pool = std::make_shared<cpu::ThreadPool>(options.threads);
    caller.emplace(*system);
    if (layout->identity.empty() && nodes.empty()) {
      return Error(ErrorCode::contract, "in-process ranks run on this process's model, which must be loaded whole");
    }
    if (layout->identity.empty()) {
      if (Status ok = identify_from_shards(); !ok) return ok;
    }
    ranks.resize(static_cast<std::size_t>(partition->ranks()));
    for (int r = 0; r < partition->ranks(); ++r) {
      if (Status ok = start_rank(r, layout->options); !ok) return ok;
    }
    for (const auto& rank : ranks) (*caller)->send(rank, RankTopology{ranks});
    (*caller)->send(coordinator, RankTopology{ranks});
    return {};
  }

  // Starts rank r's actors: in this process, or on its node.
  Status start_rank(int r, const RankOptions& options) {
    const auto index = static_cast<std::size_t>(r);
    if (!nodes.empty()) return assign_node_or_spare(r, options);
    auto worker = std::make_shared<RankWorker>(*model, pool, layout->partition, r, layout->identity, options.stage);
    ranks[index] = spawn_rank(*system, std::move(worker), session_id, static_cast<RankId>(layout->partition.ranks()),
                              coordinator, options);
    return {};
  }

  NodeAssignment assignment_for(int r, const RankOptions& options) const {
    NodeAssignment assignment;
    assignment.session = session_id;
    assignment.rank = static_cast<RankId>(r);
    for (int q = 0; q < layout->partition.ranks(); ++q) {
      assignment.unit_counts.push_back(layout->partition.range(q).count);
    }
    assignment.model_name = std::filesystem::path(model->path()).filename().string();
    assignment.model_identity = layout->identity;
    assignment.tensor_digests = layout->tensor_digests;
    assignment.max_resident_bytes = options.stage.max_resident_bytes;
    assignment.threads = layout->threads;
    assignment.phase_timeout_ms = static_cast<std::int32_t>(options.phase_timeout.count());
    assignment.faults = options.faults;
    for (const NodeAddress& node : nodes) assignment.rank_nodes.push_back(node.to_string());
    return assignment;
  }

  // `attempt` on rank r's node, or, when that fails, on the first spare on
  // which it succeeds; a spare that took a rank is a node of the session
  // from then on.
  Status on_node_or_spare(int r, const std::function<Status()>& attempt) {
    Status done = attempt();
    auto& node = nodes[static_cast<std::size_t>(r)];
    while (!done && !spares.empty()) {
      const NodeAddress lost = node;
      node = spares.front();
      spares.erase(spares.begin());
      if (attempt()) return {};
      node = lost;
    }
    return done;
  }

  Status assign_node_or_spare(int r, const RankOptions& options) {
    return on_node_or_spare(r, [&] { return assign_node(r, options); });
  }

  // In-process ranks share this process's one copy of the model, so their
  // budgets are checked here; a node checks its own.
  // Remote ranks compute where their node says (`accord node --backend`).
  Status check_local_backend(const BackendChoice& backend) const {
    if (!nodes.empty()) return {};
    return check_backend(backend);
  }

  Status check_local_residency(const Partition& partition, std::uint64_t budget) const {
    if (budget == 0 || !nodes.empty()) return {};
    for (int r = 0; r < partition.ranks(); ++r) {
      auto plan = plan_residency(*model, partition.scope(r), budget);
      if (!plan) return Error(plan.error().code(), "rank " + std::to_string(r) + ": " + plan.error().message());
    }
    return {};
  }

  // The identity of a model this process read no weights of: the digests of
  // the nodes' shards put together (identity.hpp). Two nodes that read the
  // same tensor must agree on it.
  Status identify_from_shards() {
    const ModelConfig& config = model->config();
    std::vector<std::string> digests(tensor_count(config));
    for (int r = 0; r < layout->partition.ranks(); ++r) {
      std::vector<std::string> shard;
      Status read = on_node_or_spare(r, [&] { return shard_digests(r, shard); });
      if (!read) return read;
      const std::string node = describe_node(nodes[static_cast<std::size_t>(r)], r);
      if (shard.size() != digests.size()) {
        return Error(ErrorCode::architecture, node + " has a model of another shape than " + model->path());
      }
      if (auto differs = merge_digests(digests, shard)) {
        return Error(ErrorCode::architecture, node + " has another model than the nodes before it: its " +
                                                  weight_name(weight_at(config, *differs)) + " differs");
      }
    }
    auto identity = combine_identity(config, digests);
    if (!identity) return Error(ErrorCode::architecture, "the nodes' shards do not make the whole model: " +
                                                             identity.error().message());
    layout->identity = std::move(*identity);
    layout->tensor_digests = std::move(digests);
    return {};
  }

  // Dials rank r's node and sends it `request...`; its reply, a refusal
  // and a `Reply`, goes to `take`. A refusal, or no reply, is the call's
  // error; `refused` says which refusal it was.
  template <class Reply, class... Request>
  Status ask_node(int r, NodeRefusalCode& refused, const std::function<void(Reply&)>& take,
                  Request&&... request) {
    refused = NodeRefusalCode::none;
    const NodeAddress& address = nodes[static_cast<std::size_t>(r)];
    auto node = dial_node_actor(*system, address, secret, kConnectTimeout);
    if (!node) return Error(ErrorCode::io, "cannot reach " + describe_node(address, r) + ": " + node.error().message());
    std::optional<Error> failure;
    (*caller)->request(*node, kNodeSetupTimeout, std::forward<Request>(request)...)
        .receive(
            [&](NodeRefusal& refusal, Reply& reply) {
              refused = refusal.code;
              if (refusal.refused()) failure = Error(ErrorCode::architecture, refusal.message);
              take(reply);
            },
            [&](caf::error& e) {
              failure = Error(ErrorCode::io, describe_node(address, r) + " did not answer: " + system->render(e));
            });
    if (failure) return *failure;
    return {};
  }

  // Asks rank r's node for the digests of the rank's shard.
  Status shard_digests(int r, std::vector<std::string>& digests) {
    NodeRefusalCode refused;
    return ask_node<std::vector<std::string>>(
        r, refused, [&](std::vector<std::string>& shard) { digests = std::move(shard); }, shard_atom::value,
        assignment_for(r, layout->options));
  }

  // Connects to rank r's node and has it start the rank (actors/node.hpp).
  // A node still running the rank of a session whose coordinator just went
  // away refuses until it sees it gone, within the connection timeout; it
  // is asked again until then.
  Status assign_node(int r, const RankOptions& options) {
    const auto give_up = std::chrono::steady_clock::now() + kTakenRankPatience;
    for (;;) {
      NodeRefusalCode refused;
      Status assigned = ask_node<RankActor>(
          r, refused, [&](RankActor& rank) { ranks[static_cast<std::size_t>(r)] = std::move(rank); },
          assign_atom::value, assignment_for(r, options), coordinator);
      if (refused != NodeRefusalCode::rank_taken || std::chrono::steady_clock::now() > give_up) return assigned;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  // Which ranks are gone. A local rank is asked: a request to an exited
  // local actor fails at once. A remote rank's proxy swallows requests once
  // its node is unreachable, so the coordinator, which saw it go down, is
  // asked instead.
  std::vector<bool> exited_ranks() const {
    std::vector<bool> exited(ranks.size(), false);
    if (!nodes.empty()) {
      (*caller)->request(coordinator, std::chrono::seconds(5), down_atom::value)
          .receive([&](std::vector<RankId>& down) { for (RankId r : down) exited.at(r) = true; },
                   [](caf::error&) {});
      return exited;
    }
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      (*caller)->request(ranks[r], std::chrono::seconds(5), dropped_atom::value)
          .receive([](std::vector<std::uint64_t>&) {}, [&](caf::error&) { exited[r] = true; });
    }
    return exited;
  }

  // An exited rank's actor lets go of what it holds (among it the
  // prompt-cache writer lock of a save it had open) only once its thread
  // has ended. Waiting for it means a rank started afresh never finds its
  // own predecessor's lock held.
  void await_exit(const RankActor& rank) { (*caller)->wait_for(rank); }

  // Starts afresh, with an empty state, every rank whose actors exited (or
  // whose node went away), and tells the coordinator and the other ranks.
  // The reset that follows brings them in. Their fault plan does not come
  // back: it fired.
  // How many it started.
  Result<int> restart_exited_ranks() {
    const std::vector<bool> exited = exited_ranks();
    int restarted = 0;
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      if (!exited[r]) continue;
      if (nodes.empty()) await_exit(ranks[r]);
      const RankOptions fresh{{}, layout->options.phase_timeout, std::nullopt, layout->options.stage};
      if (Status ok = start_rank(static_cast<int>(r), fresh); !ok) {
        return std::move(Error(ok.error()).mark_before_state_mutation());
      }
      (*caller)->send(coordinator, restart_atom::value, static_cast<RankId>(r), ranks[r]);
      ++restarted;
    }
    if (restarted > 0) {
      for (const auto& rank : ranks) (*caller)->send(rank, RankTopology{ranks});
    }
    return restarted;
  }

  // Every rank back to an empty state.
  Status reset() {
    TransactionRequest request;
    request.kind = TransactionKind::reset;
    auto reply = call(request);
    if (!reply) return reply.error();
    tokens.clear();
    prepared.clear();
    return {};
  }

  Result<TransactionReply> call(const TransactionRequest& request) {
    std::optional<TransactionReply> reply;
    std::string failure;
    (*caller)->request(coordinator, caf::infinite, request)
        .receive([&](TransactionReply& r) { reply = std::move(r); },
                 [&](caf::error& e) { failure = system->render(e); });
    chained.reset();
    if (!reply) return Error(ErrorCode::mechanism, "the coordinator did not answer: " + failure);
    chained = chained_step(request, *reply);
    chained_since = std::chrono::steady_clock::now();
    stats.phases_run += reply->phases_run;
    return settle(record, request.kind, std::move(*reply));
  }

  // Undoes a chained step the caller will not take, before anything that
  // reaches the ranks other than through a transaction, or reads their state.
  void end_chain() {
    if (!chained) return;
    TransactionRequest request;
    request.kind = TransactionKind::end_chain;
    (void)call(request);  // a poison it finds is the next call's error too
  }

  int position() const { return static_cast<int>(tokens.size()); }

  Result<DistributedStep> step(const StepOptions& options) {
    if (Status ok = check_step(model->config(), options, position()); !ok) {
      return std::move(Error(ok.error()).mark_before_state_mutation());
    }
    if (options.observer && !nodes.empty()) {
      return std::move(Error(ErrorCode::contract, "a session over remote nodes takes no observer: it would run on "
                                                  "the nodes, not in the caller's process")
                           .mark_before_state_mutation());
    }
    const std::span<const int> step_tokens = options.tokens;
    TransactionRequest request =
        step_request(step_tokens, options.all_rows, options.prediction_target ? options.draft_tokens : -1);
    request.sample = options.sampler != nullptr;
    request.return_logits = options.return_logits || !request.sample;
    if (request.sample) request.sampling = sampling_arguments(*options.sampler, options.stop_tokens);
    request.chain_next = options.next == NextDecode::likely && request.sample;
    if (options.observer) end_chain();  // the step begun without it must not call it
    // A chained step began when the step before it committed.
    const bool taken = chained && asks_for_chained_step(request, *chained);
    const auto start = taken ? chained_since : std::chrono::steady_clock::now();
    auto reply = [&] {
      ObserverLoan loan(*caller, ranks, options.observer);
      return call(request);
    }();
    stats.step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++stats.forward_steps;
    if (!reply) return reply.error();
    const auto kept = options.prediction_target ? step_tokens.first(static_cast<std::size_t>(
                                                              reply->prediction_target.kept_rows))
                                                        : step_tokens;
    tokens.insert(tokens.end(), kept.begin(), kept.end());
    const int rows = reply->logits.shape.empty() ? 0 : static_cast<int>(reply->logits.shape[0]);
    DistributedStep result{reply->epoch,
                           rows,
                           std::move(reply->logits.data),
                           {},
                           std::move(reply->prediction_target.hidden.data),
                           reply->prediction_target.accepted,
                           reply->prediction_target.next_token};
    if (options.sampler != nullptr) {
      *options.sampler = Sampler(options.sampler->options(), reply->sampled.rng_state);
      result.sampled = {reply->sampled.token, reply->sampled.stop};
    }
    return result;
  }

  Result<PromptCacheSaveResult> save_cache(const std::filesystem::path& root, const PromptCacheDescriptor& descriptor,
                                           std::span<const int> prefix, const std::string& prepared_input) {
    const TransactionRequest request =
        cache_request(TransactionKind::prompt_cache_save, root, descriptor, prefix, prepared_input);
    auto reply = call(request);
    if (!reply) return reply.error();
    cache_mark = CacheMark{root, descriptor, {prefix.begin(), prefix.end()}, prepared_input};
    return save_result(model->config(), request, *reply);
  }

  Status load_cache(const std::filesystem::path& root, const PromptCacheDescriptor& expected,
                    std::span<const int> prefix, const std::string& prepared_input) {
    if (Status ok = check_tokens(model->config(), prefix, 0); !ok) {
      return std::move(Error(ok.error()).mark_before_state_mutation());
    }
    auto reply = call(cache_request(TransactionKind::prompt_cache_load, root, expected, prefix, prepared_input));
    if (!reply) return reply.error();
    tokens.assign(prefix.begin(), prefix.end());
    prepared.clear();
    if (!prepared_input.empty()) prepared.set(prepared_input, static_cast<int>(prefix.size()));
    cache_mark = CacheMark{root, expected, {prefix.begin(), prefix.end()}, prepared_input};
    return {};
  }

  // After a reset: the committed tokens again, from the prompt cache this
  // session last saved or loaded where it holds a prefix of them (a rank on
  // a spare node has no shard of it; the load then aborts and changes
  // nothing), and the rest prefilled. How many came from the cache.
  Result<int> rebuild(const std::vector<int>& committed) {
    int cached = 0;
    if (cache_mark && cache_mark->prefix.size() <= committed.size() &&
        std::equal(cache_mark->prefix.begin(), cache_mark->prefix.end(), committed.begin())) {
      const CacheMark mark = *cache_mark;
      if (load_cache(mark.root, mark.descriptor, mark.prefix, mark.prepared_input)) {
        cached = static_cast<int>(mark.prefix.size());
      }
    }
    const auto rest = std::span<const int>(committed).subspan(static_cast<std::size_t>(cached));
    if (!rest.empty()) {
      auto replayed = step({.tokens = rest});
      if (!replayed) return replayed.error();
    }
    return cached;
  }
};

DistributedSession::DistributedSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DistributedSession::~DistributedSession() = default;

Result<std::unique_ptr<DistributedSession>> DistributedSession::create(const Model& model,
                                                                       const DistributedOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->own_config = std::make_unique<SessionConfig>(false);
  impl->own_system = std::make_unique<caf::actor_system>(*impl->own_config);
  impl->system = impl->own_system.get();
  if (Status ok = impl->start(model, options); !ok) return ok.error();
  return std::unique_ptr<DistributedSession>(new DistributedSession(std::move(impl)));
}

Result<std::unique_ptr<DistributedSession>> DistributedSession::connect(const std::vector<NodeAddress>& peers,
                                                                        const Model& model,
                                                                        const DistributedOptions& options) {
  if (peers.empty()) return Error(ErrorCode::contract, "a remote session needs at least one node");
  // A node serves one rank, spares included.
  std::vector<NodeAddress> every_node = peers;
  every_node.insert(every_node.end(), options.spares.begin(), options.spares.end());
  if (Status ok = check_distinct_nodes(every_node); !ok) return ok.error();
  auto impl = std::make_unique<Impl>();
  impl->nodes = peers;
  impl->spares = options.spares;
  auto secret = secret_from(options.secret_file);
  if (!secret) return secret.error();
  impl->secret = std::move(*secret);
  impl->own_config = std::make_unique<SessionConfig>(true);
  impl->own_system = std::make_unique<caf::actor_system>(*impl->own_config);
  impl->system = impl->own_system.get();
  if (Status ok = impl->start(model, options); !ok) return ok.error();
  return std::unique_ptr<DistributedSession>(new DistributedSession(std::move(impl)));
}

Result<std::unique_ptr<DistributedSession>> DistributedSession::create(caf::actor_system& system, const Model& model,
                                                                       const DistributedOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->system = &system;
  if (Status ok = impl->start(model, options); !ok) return ok.error();
  return std::unique_ptr<DistributedSession>(new DistributedSession(std::move(impl)));
}

Result<DistributedStep> DistributedSession::step(const StepOptions& options) { return impl_->step(options); }

Result<DistributedCheckpoint> DistributedSession::checkpoint() {
  TransactionRequest request;
  request.kind = TransactionKind::checkpoint;
  auto reply = impl_->call(request);
  if (!reply) return reply.error();
  DistributedCheckpoint cp;
  cp.session_id = impl_->session_id;
  cp.rank_digests.resize(impl_->ranks.size());
  for (const auto& report : reply->checkpoints) {
    cp.position = report.position;
    cp.state_epoch = report.state_epoch;
    cp.reset_epoch = report.reset_epoch;
    if (report.rank < cp.rank_digests.size()) cp.rank_digests[report.rank] = report.digest;
  }
  return cp;
}

Status DistributedSession::rollback(const DistributedCheckpoint& checkpoint) {
  if (checkpoint.session_id != impl_->session_id) {
    return std::move(Error(ErrorCode::state, "the checkpoint belongs to another session").mark_before_state_mutation());
  }
  auto reply = impl_->call(rollback_request(checkpoint.position, checkpoint.state_epoch, checkpoint.reset_epoch));
  if (!reply) return reply.error();
  impl_->tokens.resize(static_cast<std::size_t>(checkpoint.position));
  impl_->prepared.keep_within(checkpoint.position);
  return {};
}

Result<HealReport> DistributedSession::heal() {
  // A checkpoint is the cheapest transaction that tells a usable session
  // from a poisoned one.
  auto probe = checkpoint();
  if (probe) return HealReport{};
  if (probe.error().code() != ErrorCode::commit_indeterminate) return probe.error();
  const std::vector<int> committed = impl_->tokens;
  const auto prompt = committed_prompt_input_identity();
  auto replaced = impl_->restart_exited_ranks();
  if (!replaced) return replaced.error();
  if (Status ok = impl_->reset(); !ok) return ok.error();
  auto cached = impl_->rebuild(committed);
  if (!cached) return cached.error();
  impl_->prepared.restore(prompt);
  return HealReport{true, *replaced, static_cast<int>(committed.size()) - *cached, *cached};
}

Status DistributedSession::reset() {
  if (auto restarted = impl_->restart_exited_ranks(); !restarted) return restarted.error();
  return impl_->reset();
}

Result<DistributedCompleteCheckpoint> DistributedSession::checkpoint_complete() {
  auto state = checkpoint();
  if (!state) return state.error();
  return DistributedCompleteCheckpoint{std::move(*state), committed_prompt_input_identity()};
}

Status DistributedSession::rollback_complete(const DistributedCompleteCheckpoint& checkpoint) {
  if (Status ok = check_prompt_matches_position(checkpoint.prompt, checkpoint.state.position); !ok) return ok;
  if (Status s = rollback(checkpoint.state); !s) return s;
  impl_->prepared.restore(checkpoint.prompt);
  return {};
}

Result<PromptCacheSaveResult> DistributedSession::save_prompt_cache(const std::filesystem::path& root,
                                                                                const PromptCacheDescriptor& descriptor,
                                                                                std::span<const int> prefix) {
  return impl_->save_cache(root, descriptor, prefix, "");
}

Result<PromptCacheSaveResult> DistributedSession::save_prompt_cache_for_input(
    const std::filesystem::path& root, const PromptCacheDescriptor& descriptor, std::span<const int> prefix,
    const std::string& prepared_input) {
  if (Status ok = check_prepared_input_named(prepared_input); !ok) return ok.error();
  return impl_->save_cache(root, descriptor, prefix, prepared_input);
}

Status DistributedSession::load_prompt_cache(const std::filesystem::path& root,
                                                         const PromptCacheDescriptor& expected,
                                                         std::span<const int> prefix) {
  return impl_->load_cache(root, expected, prefix, "");
}

Status DistributedSession::load_prompt_cache_for_input(const std::filesystem::path& root,
                                                                   const PromptCacheDescriptor& expected,
                                                                   std::span<const int> prefix,
                                                                   const std::string& prepared_input) {
  if (Status ok = check_prepared_input_named(prepared_input); !ok) return ok;
  return impl_->load_cache(root, expected, prefix, prepared_input);
}

Result<PromptCacheRecovery> DistributedSession::recover_prompt_cache(const std::filesystem::path& root) {
  if (!impl_->nodes.empty()) return PromptCacheRecovery{};
  return accord::recover_prompt_cache(root);
}

std::optional<PromptInputIdentity> DistributedSession::committed_prompt_input_identity() const {
  return impl_->prepared.describe(impl_->tokens);
}

Status DistributedSession::inject_faults(const std::vector<Fault>& plan) {
  if (Status ok = check_fault_plan(plan, ranks()); !ok) return ok;
  impl_->end_chain();
  // Every rank that answers takes the plan, even past one that does not.
  std::optional<Error> failure;
  for (std::size_t r = 0; r < impl_->ranks.size(); ++r) {
    (*impl_->caller)->request(impl_->ranks[r], std::chrono::seconds(5), faults_atom::value, plan)
        .receive(
            [&](bool taken) {
              if (taken || failure) return;
              failure = Error(ErrorCode::contract, "rank " + std::to_string(r) + "'s node does not take fault plans " +
                                                       "(start it with --allow-faults)");
            },
            [&](caf::error& e) {
              if (failure) return;
              failure = Error(ErrorCode::mechanism, "rank " + std::to_string(r) +
                                                        " did not take the fault plan: " + impl_->system->render(e));
            });
  }
  if (failure) return *failure;
  return {};
}

Status DistributedSession::set_phase_timeout(int timeout_ms) {
  if (timeout_ms < 1) return Error(ErrorCode::contract, "the phase timeout must be positive");
  std::optional<Error> failure;
  (*impl_->caller)->request(impl_->coordinator, std::chrono::seconds(5), deadline_atom::value, timeout_ms)
      .receive([](bool) {},
               [&](caf::error& e) {
                 failure = Error(ErrorCode::mechanism, "the coordinator did not take the timeout: " +
                                                           impl_->system->render(e));
               });
  if (failure) return *failure;
  return {};
}

Status DistributedSession::stop_rank(int rank) {
  if (rank < 0 || rank >= ranks()) return Error(ErrorCode::contract, "no rank " + std::to_string(rank));
  caf::anon_send_exit(impl_->ranks[static_cast<std::size_t>(rank)], caf::exit_reason::kill);
  return {};
}

CoordinatorActor coordinator_of(const DistributedSession& session) { return session.impl()->coordinator; }

RankActor rank_actor_of(const DistributedSession& session, int rank) {
  return session.impl()->ranks.at(static_cast<std::size_t>(rank));
}

Result<std::vector<RankStateReport>> DistributedSession::rank_states() const {
  impl_->end_chain();
  std::optional<std::vector<RankStateReport>> reports;
  std::string failure;
  (*impl_->caller)->request(impl_->coordinator, std::chrono::seconds(10), rank_state_atom::value)
      .receive([&](std::vector<RankStateReport>& r) { reports = std::move(r); },
               [&](caf::error& e) { failure = impl_->system->render(e); });
  if (!reports) return Error(ErrorCode::mechanism, "the coordinator did not answer: " + failure);
  for (std::size_t r = 0; r < reports->size(); ++r) {
    if ((*reports)[r].digest.empty()) {
      return Error(ErrorCode::mechanism, "rank " + std::to_string(r) + " did not answer");
    }
  }
  return std::move(*reports);
}

Result<std::vector<std::string>> DistributedSession::rank_digests() const {
  auto states = rank_states();
  if (!states) return states.error();
  std::vector<std::string> digests;
  for (auto& state : *states) digests.push_back(std::move(state.digest));
  return digests;
}

namespace {

std::vector<WeightShare> weight_shares_of(const std::vector<RankStateReport>& states) {
  std::vector<WeightShare> shares;
  for (const RankStateReport& state : states) shares.push_back(state.weights);
  return shares;
}

}  // namespace

Result<SessionReport> DistributedSession::report() const {
  auto states = rank_states();
  if (!states) return states.error();
  SessionReport r = report_of(*impl_->model, impl_->layout->identity, impl_->record);
  add_weight_shares(r, weight_shares_of(*states));
  FastDigest digests;
  for (const RankStateReport& state : *states) {
    r.kv_bytes_used += state.kv_bytes_used;
    r.kv_bytes_capacity += state.kv_bytes_capacity;
    digests.update(state.digest.data(), state.digest.size());
  }
  r.position = states->front().position;
  r.state_epoch = states->front().state_epoch;
  r.state_digest = digests.hex();
  return r;
}

Result<MaterializationReport> DistributedSession::materialization_report() const {
  auto states = rank_states();
  if (!states) return states.error();
  MaterializationReport r;
  r.weights_mapped_bytes = impl_->model->file_bytes();
  add_weight_shares(r, weight_shares_of(*states));
  for (const RankStateReport& state : *states) {
    r.kv_allocated_bytes += state.kv_bytes_capacity;
    r.kv_materialized_bytes += state.kv_materialized_bytes;
    r.high_water_position = std::max(r.high_water_position, static_cast<int>(state.high_water));
  }
  return r;
}

std::uint64_t DistributedSession::successful_state_restoration_generation() const {
  return impl_->record.restoration_generation;
}

Result<DroppedMessageReport> DistributedSession::dropped_messages() const {
  impl_->end_chain();
  std::string failure;
  auto ask = [&](const auto& actor) {
    DroppedMessages dropped;
    (*impl_->caller)->request(actor, std::chrono::seconds(5), dropped_atom::value)
        .receive([&](std::vector<std::uint64_t>& counts) { dropped = DroppedMessages::from_counts(counts); },
                 [&](caf::error& e) { failure = impl_->system->render(e); });
    return dropped;
  };
  DroppedMessageReport report;
  report.coordinator = ask(impl_->coordinator);
  for (const auto& rank : impl_->ranks) report.ranks.push_back(ask(rank));
  if (!failure.empty()) return Error(ErrorCode::mechanism, "dropped-message counters unavailable: " + failure);
  return report;
}

int DistributedSession::ranks() const { return static_cast<int>(impl_->ranks.size()); }
int DistributedSession::position() const { return impl_->position(); }
DistributedStats DistributedSession::stats() const {
  DistributedStats stats = impl_->stats;
  // In-process ranks only: a remote rank that went away would hold the
  // caller up, and its compute is its node's.
  if (!impl_->nodes.empty()) return stats;
  if (auto states = rank_states()) {
    for (const auto& state : *states) stats.compute_seconds += state.compute_seconds;
  }
  return stats;
}

Result<std::span<const float>> DistributedTarget::keep(Result<DistributedStep> step) {
  if (!step) return step.error();
  logits_ = std::move(step->logits);
  return std::span<const float>(logits_);
}

Result<std::span<const float>> DistributedTarget::forward(std::span<const int> tokens) {
  return keep(session_.forward(tokens));
}

Result<std::span<const float>> DistributedTarget::prefill(std::span<const int> tokens) {
  return keep(session_.prefill(tokens));
}

Result<std::span<const float>> DistributedTarget::decode(int token) { return keep(session_.decode(token)); }

Result<SampledToken> DistributedTarget::prefill_and_sample(std::span<const int> tokens, Sampler& sampler,
                                                           std::span<const int> stop_tokens) {
  auto step = session_.step(
      {.tokens = tokens, .sampler = &sampler, .stop_tokens = stop_tokens, .return_logits = false});
  if (!step) return step.error();
  return step->sampled;
}

Result<SampledToken> DistributedTarget::decode_and_sample(int token, Sampler& sampler,
                                                          std::span<const int> stop_tokens, NextDecode next) {
  auto step = session_.step(
      {.tokens = {&token, 1}, .sampler = &sampler, .stop_tokens = stop_tokens, .return_logits = false, .next = next});
  if (!step) return step.error();
  return step->sampled;
}

Result<DraftVerdict> DistributedTarget::decode_draft(int token, std::span<const int> draft) {
  const PredictionTargetInput input = draft_input(token, draft);
  auto step = session_.step({.tokens = input.tokens, .prediction_target = true, .draft_tokens = input.draft_tokens});
  if (!step) return step.error();
  return DraftVerdict{step->accepted, step->next_token};
}

Status DistributedTarget::load_prompt_cache(const std::filesystem::path& root, const PromptCacheDescriptor& descriptor,
                                            std::span<const int> prefix) {
  return session_.load_prompt_cache(root, descriptor, prefix);
}

Status DistributedTarget::save_prompt_cache(const std::filesystem::path& root, const PromptCacheDescriptor& descriptor,
                                            std::span<const int> prefix) {
  auto saved = session_.save_prompt_cache(root, descriptor, prefix);
  if (!saved) return saved.error();
  return {};
}

}  // namespace accord
