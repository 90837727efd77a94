// A session whose model is split over several ranks, each rank a group of
// CAF actors, driven by a coordinator through the phase protocol. Every
// operation is one transaction: the call blocks once, until the coordinator
// answers, and an aborted step leaves every rank as it was.
//
// This header includes no CAF, no kernels and no agreement internals, so
// applications can hold a session without them; the actors live in
// actors/*.cpp. The session owns an actor system of its own; a service
// that runs it inside its own (embedding) includes actors/caf_session.hpp.
//
// Threading: one call at a time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "actors/node_address.hpp"
#include "messages/dropped_messages.hpp"
#include "messages/protocol.hpp"
#include "runtime/base/error.hpp"
#include "runtime/fault/fault_plan.hpp"
#include "runtime/model/backend.hpp"
#include "runtime/model/model.hpp"
#include "runtime/rank/observer.hpp"
#include "runtime/rank/prompt_cache_descriptor.hpp"
#include "runtime/rank/prompt_cache_recovery.hpp"
#include "runtime/rank/prompt_input.hpp"
#include "runtime/session/heal_report.hpp"
#include "runtime/session/session.hpp"
#include "runtime/session/step_options.hpp"
#include "runtime/text/sampler.hpp"

namespace accord {

struct DistributedOptions {
  int ranks = 1;                 // in-process ranks; connect() has one per node
  std::vector<int> unit_counts;  // units per rank; empty: Partition::by_weight
  // Threads of the compute pool. In-process ranks share one pool of this
  // many: a pipeline with one sequence runs one rank at a time, so the rank
  // whose turn it is uses them all. A remote rank's node makes a pool of
  // this many for its rank, capped at what its machine can use.
  int threads = 1;
  int phase_timeout_ms = 5000;  // a rank that does not report within it aborts the step
  // Faults to inject (runtime/fault/fault_plan.hpp). A service that wants
  // ACCORD_FAULTS' scenarios, as `accord generate` runs them, adds those of
  // read_environment() (runtime/base/environment.hpp).
  std::vector<Fault> faults;
  // connect(): the file of the cluster's secret, which the nodes must prove
  // and this coordinator proves to them (docs/protocol.md, "Node
  // security"). Empty: none, and only nodes on loopback admit the
  // coordinator.
  std::string secret_file;
  // connect(): nodes that take the rank of a node that cannot be reached,
  // at the start or when the session heals, in order; each serves once.
  std::vector<NodeAddress> spares;
  // Each rank keeps at most this many bytes of its weights in memory and
  // streams the rest each step (runtime/model/residency.hpp); 0: all
  // resident. A node's own --max-resident-bytes wins over it.
  std::uint64_t max_resident_bytes = 0;
  // The element type of every rank's keys and values.
  KvType kv_type = KvType::f32;
  // Where in-process ranks compute (runtime/model/stage_backend.hpp); a
  // remote rank computes where its node's own --backend says.
  BackendChoice backend = {};
  // Each routed block's experts spread over this many of the ranks
  // (runtime/rank/expert_placement.hpp); 1: each rank holds its own
  // units' experts.
  int expert_ranks = 1;
};

struct DistributedStep {
  std::uint64_t epoch = 0;
  int rows = 0;
  std::vector<float> logits;  // (rows, vocab), as the observer left them
  SampledToken sampled;       // a step with a sampler: the output owner's pick
  // A prediction-target step's: the output owner's final hidden state of
  // the last kept row, (dim), as every rank received it; how many draft
  // tokens the step kept, and greedy decoding's token after them.
  std::vector<float> prediction_target_capture;
  int accepted = 0;
  int next_token = -1;
};

struct DistributedCheckpoint {
  std::uint64_t session_id = 0;
  std::int32_t position = 0;
  std::uint64_t state_epoch = 0;
  std::uint64_t reset_epoch = 0;
  std::vector<std::string> rank_digests;
};

// A distributed checkpoint with the committed prompt's identity, as
// Session::checkpoint_complete.
struct DistributedCompleteCheckpoint {
  DistributedCheckpoint state;
  std::optional<PromptInputIdentity> prompt;
};

// Where the time of forward steps went, for reports and benchmarks.
struct DistributedStats {
  std::uint64_t forward_steps = 0;
  double step_seconds = 0;     // the caller's wall time inside forward steps
  double compute_seconds = 0;  // the ranks' time in their units and head
  std::uint64_t phases_run = 0;
  // What the protocol (messages, agreement, copies) cost per forward step:
  // wall time not spent computing. Ranks of a pipeline compute one after
  // another, so their compute times add up.
  double protocol_microseconds_per_step() const {
    return forward_steps == 0 ? 0.0 : (step_seconds - compute_seconds) * 1e6 / static_cast<double>(forward_steps);
  }
  // The same as a share of the steps' wall time.
  double protocol_share() const { return step_seconds == 0 ? 0.0 : (step_seconds - compute_seconds) / step_seconds; }
  // What was counted between `earlier` and this (the figures of a stretch
  // of a run).
  DistributedStats since(const DistributedStats& earlier) const {
    return {forward_steps - earlier.forward_steps, step_seconds - earlier.step_seconds,
            compute_seconds - earlier.compute_seconds, phases_run - earlier.phases_run};
  }
};

// Protocol messages that were ignored (stale, duplicate, late, ...), by
// reason: what the coordinator dropped and what each rank dropped.
struct DroppedMessageReport {
  DroppedMessages coordinator;
  std::vector<DroppedMessages> ranks;

  DroppedMessages total() const {
    DroppedMessages sum = coordinator;
    for (const auto& rank : ranks) sum += rank;
    return sum;
  }
};

class DistributedSession {
 public:
  // With an actor system of its own. Inside the caller's actor system:
  // create_in_system (actors/caf_session.hpp).
  static Result<std::unique_ptr<DistributedSession>> create(const Model& model, const DistributedOptions& options);
  // Over remote nodes (`accord node`, actors/node.hpp), rank r on peers[r],
  // with an actor system of its own in which the coordinator runs. Every
  // node reads its rank's shard of the model (its own --model, or
  // model.path()'s file name in its --model-dir) and checks its tensors'
  // digests against the model's. `model` may hold no weights at all
  // (WeightScope::nothing()): the nodes' shards then make its identity,
  // and two nodes that read a tensor both must agree on it. A node that cannot be reached, does not
  // answer or refuses fails the call, naming the node. A rank whose node
  // goes away (its connection breaks, or its heartbeats stop) poisons the
  // session naming the rank; reset() connects to its address
  // again. Observers stay in the caller's process, so remote steps take
  // none.
  static Result<std::unique_ptr<DistributedSession>> connect(const std::vector<NodeAddress>& peers, const Model& model,
                                                             const DistributedOptions& options);
  ~DistributedSession();

  // One forward step as one transaction, as Session::step
  // (runtime/session/step_options.hpp).
  //
  // An observer is lent to every in-process rank for the step; ranks run
  // one after another, so its calls never overlap, though they come from
  // the ranks' threads. The ranks share its ownership because a rank cut
  // off by a poisoned session may still be inside it when the call
  // returns. A session over remote nodes takes none.
  //
  // With a sampler the output owner samples the next token from the
  // published logits of the last row (SamplingSynchronization), and every
  // rank holds the pick and whether it is a stop token before the step
  // commits. return_logits = false keeps the logits on the output owner,
  // so the 128 KB a row (for a 32000-token vocabulary) do not travel. With
  // NextDecode::likely the coordinator begins the step after this one, on
  // the token it sampled, as soon as this one commits (a chained step,
  // docs/protocol.md): the next decode of that token then only waits for
  // its commit. Any other call first undoes that step.
  //
  // A prediction-target step: after OutputObservation the output owner
  // verifies the draft and captures the residual stream after the last
  // unit (before the final norm) of the last kept row
  // (PredictionTargetCapture) and sends both to every rank, each of which
  // reports that it holds them (PredictionTargetCapturePublication), checks
  // the verdict against its own lane (PredictionTargetStatePreparation) and
  // rolls the rejected rows back (PredictionExtensionExecution). logits is
  // the last kept row's.
  Result<DistributedStep> step(const StepOptions& options);
  // The logits of every row.
  Result<DistributedStep> forward(std::span<const int> tokens) { return step({.tokens = tokens, .all_rows = true}); }
  // The last row's logits.
  Result<DistributedStep> prefill(std::span<const int> tokens) { return step({.tokens = tokens}); }
  Result<DistributedStep> decode(int token) { return step({.tokens = {&token, 1}}); }
  // Heals a poisoned session (docs/healing.md): a session that is usable
  // (a failed step only aborted) is left as it is. Otherwise every rank
  // that was lost is started afresh (restarted in process; a remote one
  // on its node again once it answers, else on the first spare that does),
  // every rank is reset (reset) and the committed tokens are
  // prefilled again, so every rank holds the KV rows it held after the last
  // committed step, bit for bit, under a new state epoch. The error says
  // why it could not (a node that does not answer and no spare that does).
  Result<HealReport> heal();

  Result<DistributedCheckpoint> checkpoint();
  Status rollback(const DistributedCheckpoint& checkpoint);
  // As Session::truncate, on every rank.
  Status truncate(int position);
  // Starts again every rank whose actors exited (in process) or whose node
  // went away (connecting to its address again; fails naming the node when
  // it cannot), then resets every rank to an empty state.
  Status reset();
  // As Session's, on every rank (in-process ranks: a node's shelf is in
  // its own process, so over nodes they are refused). The digest joins the
  // ranks' content digests, in rank order.
  Result<SessionSnapshot> snapshot();
  Status restore(const SessionSnapshot& snapshot);
  // What snapshot() would cost now, summed over the ranks, read as
  // rank_states() is: no transaction, nothing changes. Fails when a rank
  // does not answer.
  Result<SnapshotEstimate> estimate_snapshot() const;
  // A new session of in-process ranks as this one's (the same model,
  // partition, threads, KV type and backend; no faults), in this one's
  // actor system, restored to `snapshot`; this session is unchanged.
  Result<std::unique_ptr<DistributedSession>> fork(const SessionSnapshot& snapshot) const;

  // The state and the committed prompt's identity together.
  Result<DistributedCompleteCheckpoint> checkpoint_complete();
  Status rollback_complete(const DistributedCompleteCheckpoint& checkpoint);

  // The prompt cache over every rank (docs/prompt-cache.md): one shard per
  // rank, under root/rank-NN, all of one save. A save publishes every
  // rank's shard or none; a load checks every rank's manifest and shard
  // before any rank's state changes, and refuses a cache saved with
  // another number of ranks. As Session's calls of the same names.
  Result<PromptCacheSaveResult> save_prompt_cache(const std::filesystem::path& root,
                                                  const PromptCacheDescriptor& descriptor, std::span<const int> prefix);
  Result<PromptCacheSaveResult> save_prompt_cache_for_input(const std::filesystem::path& root,
                                                            const PromptCacheDescriptor& descriptor,
                                                            std::span<const int> prefix,
                                                            const std::string& prepared_input);
  Status load_prompt_cache(const std::filesystem::path& root, const PromptCacheDescriptor& expected,
                           std::span<const int> prefix);
  Status load_prompt_cache_for_input(const std::filesystem::path& root, const PromptCacheDescriptor& expected,
                                     std::span<const int> prefix, const std::string& prepared_input);
  // Heals a cache a killed save left on mixed generations
  // (runtime/rank/prompt_cache_recovery.hpp) when every rank runs in
  // this process and so shares its file system. Over remote nodes each
  // rank's folder is its node's, and nothing is done (action none).
  Result<PromptCacheRecovery> recover_prompt_cache(const std::filesystem::path& root);
  // What produced the committed tokens; none when the state is empty.
  std::optional<PromptInputIdentity> committed_prompt_input_identity() const;

  // Replaces every rank's fault plan (runtime/fault/fault_plan.hpp);
  // occurrences count from now. Refused when the plan does not fit the
  // topology; an error names the first rank that did not answer (every
  // other rank took the plan).
  Status inject_faults(const std::vector<Fault>& plan);

  // The coordinator's phase timeout from now on (DistributedOptions::
  // phase_timeout_ms at creation). A delay fault still holds a rank's work
  // for 1.5 times the timeout the session was created with.
  Status set_phase_timeout(int timeout_ms);

  // Stops rank `rank`'s actors as if the rank had failed (fault scenarios):
  // the coordinator sees it go down and poisons the session.
  Status stop_rank(int rank);

  // Asks the coordinator and every rank; fails when one does not answer.
  Result<DroppedMessageReport> dropped_messages() const;
  // Each rank's state digest (its KV rows up to the position, the position,
  // the state epoch and the tokens), read without a transaction but after
  // every decision so far; fails naming a rank that does not answer.
  Result<std::vector<std::string>> rank_digests() const;
  // Each rank's digest and KV figures, read as rank_digests() is.
  Result<std::vector<RankStateReport>> rank_states() const;

  // As Session's (runtime/session/session.hpp), over every rank: the KV
  // figures are the ranks' sums, state_epoch is the one every rank
  // committed, and state_digest is the XXH3-128 of the ranks' digests in
  // rank order. Weights are the caller's model's (a node maps its own
  // copy). Fails when a rank does not answer.
  Result<SessionReport> report() const;
  Result<MaterializationReport> materialization_report() const;
  // Counts successful restorations: aborted steps that every rank undid,
  // and rollbacks.
  std::uint64_t successful_state_restoration_generation() const;

  int ranks() const;
  int position() const;  // the committed position
  // The committed tokens, as every rank holds them.
  std::span<const int> tokens() const;
  DistributedStats stats() const;

 private:
  // What actors/*.cpp reach of it (actors/distributed_session_impl.hpp).
  friend struct DistributedSessionAccess;
  struct Impl;
  explicit DistributedSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace accord
