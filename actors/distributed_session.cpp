// The session itself: creation, steps, calls and chains, and what reads the
// ranks. Where the ranks live is actors/rank_placement.cpp's; healing is
// actors/healing.cpp's; the actor system's configuration is
// actors/actor_config.cpp's.
#include "actors/distributed_session.hpp"

#include <caf/all.hpp>
#include <chrono>
#include <optional>
#include <random>

#include "actors/actor_config.hpp"
#include "actors/atoms.hpp"
#include "actors/caf_session.hpp"
#include "actors/coordinator.hpp"
#include "actors/distributed_session_impl.hpp"
#include "messages/session_api.hpp"
#include "runtime/engine/session_requests.hpp"
#include "runtime/engine/transaction_driver.hpp"
#include "runtime/fault/fault_plan.hpp"
#include "runtime/io/digest.hpp"
#include "runtime/model/identity.hpp"
#include "runtime/rank/expert_placement.hpp"
#include "runtime/rank/partition.hpp"
#include "runtime/rank/prompt_cache_recovery.hpp"
#include "runtime/rank/prompt_input.hpp"
#include "runtime/rank/snapshot_shelf.hpp"
#include "runtime/session/session.hpp"

namespace accord {

namespace {

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

std::vector<WeightShare> weight_shares_of(const std::vector<RankStateReport>& states) {
  std::vector<WeightShare> shares;
  for (const RankStateReport& state : states) shares.push_back(state.weights);
  return shares;
}

// The session's own actor system, configured for its ranks' placement.
void own_system(SessionActors& session, bool remote) {
  session.own_config = std::make_unique<SessionConfig>(remote);
  session.own_system = std::make_unique<caf::actor_system>(*session.own_config);
  session.system = session.own_system.get();
}

}  // namespace

DistributedSession::Impl::Impl(std::unique_ptr<RankPlacement> where) : placement(std::move(where)) {
  session_id = random_session_id();
}

DistributedSession::Impl::~Impl() {
  if (system == nullptr) return;
  // Stop every actor and wait for the local ones, so no rank touches the
  // model after the session is gone. The placement says which ranks are
  // local.
  caf::scoped_actor self{*system};
  std::vector<caf::actor> local = {caf::actor_cast<caf::actor>(coordinator)};
  placement->stop_ranks(self, ranks, local);
  for (const auto& actor : local) self->send_exit(actor, caf::exit_reason::user_shutdown);
  self->wait_for(local);
}

Result<Partition> DistributedSession::Impl::partition_for(const DistributedOptions& options) const {
  const int rank_count = placement->rank_count(options.ranks);
  return options.unit_counts.empty() ? Partition::by_weight(*model, rank_count)
                                     : Partition::from_counts(model->config().n_layers, options.unit_counts);
}

Result<RankOptions> DistributedSession::Impl::rank_options_for(const Partition& partition,
                                                               const DistributedOptions& options) const {
  if (options.threads < 1) return Error(ErrorCode::contract, "a session needs at least one thread");
  if (options.phase_timeout_ms < 1) return Error(ErrorCode::contract, "the phase timeout must be positive");
  RankOptions rank_options;
  rank_options.phase_timeout = std::chrono::milliseconds(options.phase_timeout_ms);
  rank_options.faults = options.faults;
  rank_options.stage = {options.backend, options.max_resident_bytes, options.kv_type, nullptr, options.expert_ranks};
  if (auto experts = ExpertPlacement::make(partition, model->config(), options.expert_ranks); !experts) {
    return experts.error();
  }
  if (Status ok = check_fault_plan(rank_options.faults, partition.ranks(), options.expert_ranks); !ok) {
    return ok.error();
  }
  if (Status ok = placement->check_here(*model, partition, options); !ok) return ok.error();
  return rank_options;
}

Status DistributedSession::Impl::start(const Model& m, const DistributedOptions& options) {
  model = &m;
  started_with = options;
  auto partition = partition_for(options);
  if (!partition) return partition.error();
  auto rank_options = rank_options_for(*partition, options);
  if (!rank_options) return rank_options.error();
  const auto coordination = CoordinatorOptions::for_phase_timeout(std::chrono::milliseconds(options.phase_timeout_ms));
  const SessionRanks session_ranks(static_cast<RankId>(partition->ranks()), static_cast<RankId>(options.expert_ranks));
  coordinator = spawn_coordinator(*system, session_id, session_ranks, coordination);
  layout.emplace(
      RankLayout{*partition, options.threads, model_identity(m), m.tensor_digests(), std::move(*rank_options)});
  placement->prepare(options);
  caller.emplace(*system);
  if (Status ok = placement->complete_identity(*this); !ok) return ok;
  ranks.resize(static_cast<std::size_t>(partition->ranks()));
  for (int r = 0; r < partition->ranks(); ++r) {
    if (Status ok = placement->start_rank(*this, r, layout->options); !ok) return ok;
  }
  for (const auto& rank : ranks) (*caller)->send(rank, RankTopology{ranks});
  (*caller)->send(coordinator, RankTopology{ranks});
  return {};
}

Result<TransactionReply> DistributedSession::Impl::call(const TransactionRequest& request) {
  std::optional<TransactionReply> reply;
  std::string failure;
  (*caller)
      ->request(coordinator, caf::infinite, request)
      .receive([&](TransactionReply& r) { reply = std::move(r); }, [&](caf::error& e) { failure = system->render(e); });
  chained.reset();
  if (!reply) return Error(ErrorCode::mechanism, "the coordinator did not answer: " + failure);
  chained = chained_step(request, *reply);
  chained_since = std::chrono::steady_clock::now();
  stats.phases_run += reply->phases_run;
  return settle(record, request.kind(), std::move(*reply));
}

void DistributedSession::Impl::end_chain() {
  if (!chained) return;
  const TransactionRequest request{EndChainRequest{}};
  (void)call(request);  // a poison it finds is the next call's error too
}

Result<DistributedStep> DistributedSession::Impl::step(const StepOptions& options) {
  if (Status ok = check_step(model->config(), options, position()); !ok) {
    return std::move(Error(ok.error()).mark_before_state_mutation());
  }
  if (options.observer && !placement->takes_observers()) {
    return std::move(Error(ErrorCode::contract,
                           "a session over remote nodes takes no observer: it would run on "
                           "the nodes, not in the caller's process")
                         .mark_before_state_mutation());
  }
  const std::span<const int> step_tokens = options.tokens;
  TransactionRequest request =
      step_request(step_tokens, options.all_rows, options.prediction_target ? options.draft_tokens : -1);
  auto& forward = std::get<ForwardStepRequest>(request.operation);
  if (options.sampler != nullptr) forward.sampling = sampling_arguments(*options.sampler, options.stop_tokens);
  forward.return_logits = options.return_logits || !forward.sampling;
  forward.chain_next = options.next == NextDecode::likely && forward.sampling;
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
  const auto kept = options.prediction_target
                        ? step_tokens.first(static_cast<std::size_t>(reply->prediction_target.kept_rows))
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

Result<PromptCacheSaveResult> DistributedSession::Impl::save_cache(const std::filesystem::path& root,
                                                                   const PromptCacheDescriptor& descriptor,
                                                                   std::span<const int> prefix,
                                                                   const std::string& prepared_input) {
  const TransactionRequest request =
      cache_request(TransactionKind::prompt_cache_save, root, descriptor, prefix, prepared_input);
  auto reply = call(request);
  if (!reply) return reply.error();
  cache_mark = CacheMark{root, descriptor, {prefix.begin(), prefix.end()}, prepared_input};
  return save_result(model->config(), request, *reply);
}

Status DistributedSession::Impl::load_cache(const std::filesystem::path& root, const PromptCacheDescriptor& expected,
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

DistributedSession::DistributedSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DistributedSession::~DistributedSession() = default;

namespace {

// A started session of in-process ranks, in `system`, or in an actor
// system of its own where that is null.
Result<std::unique_ptr<DistributedSessionAccess::Impl>> start_in_process(caf::actor_system* system, const Model& model,
                                                                         const DistributedOptions& options) {
  auto impl = std::make_unique<DistributedSessionAccess::Impl>(place_in_process());
  if (system == nullptr) {
    own_system(*impl, false);
  } else {
    impl->system = system;
  }
  if (Status ok = impl->start(model, options); !ok) return ok.error();
  return impl;
}

}  // namespace

Result<std::unique_ptr<DistributedSession>> DistributedSession::create(const Model& model,
                                                                       const DistributedOptions& options) {
  auto impl = start_in_process(nullptr, model, options);
  if (!impl) return impl.error();
  return DistributedSessionAccess::wrap(std::move(*impl));
}

Result<std::unique_ptr<DistributedSession>> DistributedSession::connect(const std::vector<NodeAddress>& peers,
                                                                        const Model& model,
                                                                        const DistributedOptions& options) {
  auto placement = place_on_nodes(peers, options);
  if (!placement) return placement.error();
  auto impl = std::make_unique<Impl>(std::move(*placement));
  own_system(*impl, true);
  if (Status ok = impl->start(model, options); !ok) return ok.error();
  return std::unique_ptr<DistributedSession>(new DistributedSession(std::move(impl)));
}

Result<std::unique_ptr<DistributedSession>> create_in_system(caf::actor_system& system, const Model& model,
                                                             const DistributedOptions& options) {
  auto impl = start_in_process(&system, model, options);
  if (!impl) return impl.error();
  return DistributedSessionAccess::wrap(std::move(*impl));
}

Result<DistributedStep> DistributedSession::step(const StepOptions& options) { return impl_->step(options); }

Result<DistributedCheckpoint> DistributedSession::checkpoint() {
  const TransactionRequest request{CheckpointRequest{}};
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

Status DistributedSession::truncate(int position) {
  if (Status ok = check_truncation(position, this->position()); !ok) {
    return std::move(Error(ok.error()).mark_before_state_mutation());
  }
  auto here = checkpoint();
  if (!here) return here.error();
  DistributedCheckpoint back = std::move(*here);
  back.position = position;
  back.rank_digests.clear();  // of no state: `back` is only handed to rollback
  return rollback(back);
}

Result<SessionSnapshot> DistributedSession::snapshot() {
  if (!impl_->placement->shares_snapshot_shelf()) {
    return std::move(Error(ErrorCode::contract,
                           "snapshots of ranks on nodes are not kept: each node's would live in its own process")
                         .mark_before_state_mutation());
  }
  const std::uint64_t id = SnapshotShelf::new_id();
  auto hold = SnapshotShelf::process().hold(id);
  auto reply = impl_->call({SnapshotRequest{id}});
  if (!reply) return reply.error();
  std::string digest;
  for (std::size_t r = 0; r < impl_->ranks.size(); ++r) {
    auto image = SnapshotShelf::process().find(id, static_cast<RankId>(r));
    if (image == nullptr) return Error(ErrorCode::mechanism, "rank " + std::to_string(r) + " shelved no snapshot");
    if (r > 0) digest += ':';
    digest += SessionState::content_digest(image->image);
  }
  return SessionSnapshot{id,
                         impl_->layout->identity,
                         impl_->tokens,
                         committed_prompt_input_identity(),
                         std::move(digest),
                         std::move(hold)};
}

Status DistributedSession::restore(const SessionSnapshot& snapshot) {
  if (snapshot.model_identity != impl_->layout->identity) {
    return std::move(Error(ErrorCode::state, "the snapshot was taken of another model").mark_before_state_mutation());
  }
  auto reply = impl_->call({SnapshotRestoreRequest{snapshot.id}});
  if (!reply) return reply.error();
  impl_->tokens = snapshot.tokens;
  impl_->prepared.restore(snapshot.prompt);
  return {};
}

Result<SnapshotEstimate> DistributedSession::estimate_snapshot() const {
  auto states = rank_states();
  if (!states) return states.error();
  SnapshotEstimate estimate;
  for (const RankStateReport& state : *states) {
    estimate.copied_bytes += state.snapshot_copied_bytes;
    estimate.shared_bytes += state.snapshot_shared_bytes;
    estimate.copy_on_write_bytes += state.snapshot_copy_on_write_bytes;
  }
  return estimate;
}

Result<std::unique_ptr<DistributedSession>> DistributedSession::fork(const SessionSnapshot& snapshot) const {
  if (!impl_->placement->shares_snapshot_shelf()) {
    return std::move(Error(ErrorCode::contract, "forks of ranks on nodes are not made: their snapshots are not kept")
                         .mark_before_state_mutation());
  }
  DistributedOptions options = impl_->started_with;
  options.faults.clear();  // a scenario of this session's, not its fork's
  auto impl = start_in_process(impl_->own_system ? nullptr : impl_->system, *impl_->model, options);
  if (!impl) return impl.error();
  std::unique_ptr<DistributedSession> forked = DistributedSessionAccess::wrap(std::move(*impl));
  if (Status ok = forked->restore(snapshot); !ok) return ok.error();
  return forked;
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

Result<PromptCacheSaveResult> DistributedSession::save_prompt_cache_for_input(const std::filesystem::path& root,
                                                                              const PromptCacheDescriptor& descriptor,
                                                                              std::span<const int> prefix,
                                                                              const std::string& prepared_input) {
  if (Status ok = check_prepared_input_named(prepared_input); !ok) return ok.error();
  return impl_->save_cache(root, descriptor, prefix, prepared_input);
}

Status DistributedSession::load_prompt_cache(const std::filesystem::path& root, const PromptCacheDescriptor& expected,
                                             std::span<const int> prefix) {
  return impl_->load_cache(root, expected, prefix, "");
}

Status DistributedSession::load_prompt_cache_for_input(const std::filesystem::path& root,
                                                       const PromptCacheDescriptor& expected,
                                                       std::span<const int> prefix, const std::string& prepared_input) {
  if (Status ok = check_prepared_input_named(prepared_input); !ok) return ok;
  return impl_->load_cache(root, expected, prefix, prepared_input);
}

Result<PromptCacheRecovery> DistributedSession::recover_prompt_cache(const std::filesystem::path& root) {
  if (!impl_->placement->shares_file_system()) return PromptCacheRecovery{};
  return accord::recover_prompt_cache(root);
}

std::optional<PromptInputIdentity> DistributedSession::committed_prompt_input_identity() const {
  return impl_->prepared.describe(impl_->tokens);
}

Status DistributedSession::inject_faults(const std::vector<Fault>& plan) {
  if (Status ok = check_fault_plan(plan, ranks(), impl_->started_with.expert_ranks); !ok) return ok;
  impl_->end_chain();
  // Every rank that answers takes the plan, even past one that does not.
  std::optional<Error> failure;
  for (std::size_t r = 0; r < impl_->ranks.size(); ++r) {
    (*impl_->caller)
        ->request(impl_->ranks[r], std::chrono::seconds(5), faults_atom::value, plan)
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
  (*impl_->caller)
      ->request(impl_->coordinator, std::chrono::seconds(5), deadline_atom::value, timeout_ms)
      .receive([](bool) {},
               [&](caf::error& e) {
                 failure = Error(ErrorCode::mechanism,
                                 "the coordinator did not take the timeout: " + impl_->system->render(e));
               });
  if (failure) return *failure;
  return {};
}

Status DistributedSession::stop_rank(int rank) {
  if (rank < 0 || rank >= ranks()) return Error(ErrorCode::contract, "no rank " + std::to_string(rank));
  caf::anon_send_exit(impl_->ranks[static_cast<std::size_t>(rank)], caf::exit_reason::kill);
  return {};
}

CoordinatorActor coordinator_of(const DistributedSession& session) {
  return DistributedSessionAccess::impl(session).coordinator;
}

RankActor rank_actor_of(const DistributedSession& session, int rank) {
  return DistributedSessionAccess::impl(session).ranks.at(static_cast<std::size_t>(rank));
}

Result<std::vector<RankStateReport>> DistributedSession::rank_states() const {
  impl_->end_chain();
  std::optional<std::vector<RankStateReport>> reports;
  std::string failure;
  (*impl_->caller)
      ->request(impl_->coordinator, std::chrono::seconds(10), rank_state_atom::value)
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

Result<SessionReport> DistributedSession::report() const {
  auto states = rank_states();
  if (!states) return states.error();
  SessionReport r = report_of(*impl_->model, impl_->layout->identity, impl_->record);
  add_weight_shares(r, weight_shares_of(*states));
  FastDigest digests;
  for (const RankStateReport& state : *states) {
    if (impl_->model->config().routed()) r.expert_rows.push_back(state.expert_rows);
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
    r.kv_allocated_bytes += state.kv_held_bytes;
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
    (*impl_->caller)
        ->request(actor, std::chrono::seconds(5), dropped_atom::value)
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
std::span<const int> DistributedSession::tokens() const { return impl_->tokens; }
DistributedStats DistributedSession::stats() const {
  DistributedStats stats = impl_->stats;
  // Only where the placement counts it (in process).
  if (!impl_->placement->counts_compute()) return stats;
  if (auto states = rank_states()) {
    for (const auto& state : *states) stats.compute_seconds += state.compute_seconds;
  }
  return stats;
}

}  // namespace accord
