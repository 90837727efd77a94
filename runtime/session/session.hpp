// The single-rank transactional session: the user's handle on a model's
// text state. Every operation is a transaction with an epoch that only
// grows, run by the one transaction engine (runtime/engine) over the direct
// transport with one rank: the same plan, agreement machines, local work,
// undo and fault plans as a distributed session, without actors or threads
// of its own. When any phase fails, the session restores exactly the state
// it had before and returns a typed error carrying the epoch and the phase.
// Nothing a failed step did remains.
//
// Threading: one call at a time; the session owns its state, borrows the
// model (which must outlive it) and owns or shares its compute pool.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "messages/weights.hpp"
#include "runtime/base/error.hpp"
#include "runtime/fault/fault_plan.hpp"
#include "runtime/model/backend.hpp"
#include "runtime/model/model.hpp"
#include "runtime/rank/observer.hpp"
#include "runtime/rank/phase.hpp"
#include "runtime/rank/prompt_cache_descriptor.hpp"
#include "runtime/rank/prompt_input.hpp"
#include "runtime/rank/transaction_record.hpp"
#include "runtime/session/step_options.hpp"

namespace accord {

namespace cpu {
class ThreadPool;  // kernels/cpu/thread_pool.hpp
}  // namespace cpu
class StepBatcher;  // runtime/rank/step_batcher.hpp

// Called after each phase's local work; an error (or exception) fails the
// phase as if the work had. Tests and fault scenarios use it.
using FailureHook = std::function<Status(Phase phase, std::uint64_t epoch)>;

// The output of a forward step, valid until the next call on the session.
struct StepResult {
  std::uint64_t epoch = 0;
  int first_position = 0;
  int rows = 0;
  std::span<const float> logits;  // (rows, vocab)
  // A prediction-target step's: the final hidden state of the last kept
  // row, (dim); how many draft tokens it kept, and greedy decoding's token
  // after them.
  std::span<const float> capture;
  int accepted = 0;
  int next_token = -1;
  SampledToken sampled;  // a step with a sampler: its pick
};

// An opaque point to come back to with rollback().
struct SessionCheckpoint {
  std::uint64_t session_id = 0;
  std::uint64_t reset_epoch = 0;  // the reset the state descended from (0: none)
  int position = 0;
  std::uint64_t state_epoch = 0;
  std::string digest;  // of the state when taken
};

struct CompleteCheckpoint {
  SessionCheckpoint state;
  std::optional<PromptInputIdentity> prompt;
};

// A complete, stable copy of a session's state (docs/session.md,
// "Snapshots and forks"): the keys and values of its rows, its tokens and
// position, and its prompt input's identity. The ranks keep it in their
// process (runtime/rank/snapshot_shelf.hpp), sharing the cache's blocks:
// it costs no copy, and it stays as it was however the session, or any
// session restored from it, advances. restore() returns a session to it;
// fork() makes a new session of it. Copies of the handle share one
// snapshot; the last copy to go releases it.
struct SessionSnapshot {
  std::uint64_t id = 0;
  std::string model_identity;
  std::vector<int> tokens;  // its position is their count
  std::optional<PromptInputIdentity> prompt;
  std::string digest;  // of its content: rows, position, tokens (SessionState::content_digest)
  std::shared_ptr<const void> hold;

  int position() const { return static_cast<int>(tokens.size()); }
};

// What snapshot() would cost now, over every rank; nothing changes.
struct SnapshotEstimate {
  std::uint64_t copied_bytes = 0;  // copied when it is taken (none for a paged cache)
  std::uint64_t shared_bytes = 0;  // held by the session and the snapshot both
  // At most what the session copies later as it writes into blocks the
  // snapshot shares: the last, part-filled one, as the next step appends.
  std::uint64_t copy_on_write_bytes = 0;
};

struct SessionReport {
  std::string model_identity;
  std::uint64_t weights_bytes = 0;                             // the model's weights as held in memory
  std::map<std::string, std::uint64_t> weights_bytes_by_type;  // the same by type: "F32", "Q8_0", ...
  std::uint64_t weights_resident_bytes = 0;                    // the sum of the ranks' measured resident bytes
  std::string weights_residency;                               // "resident", or "layered" when a rank has a budget
  std::vector<WeightShare> weight_shares;                      // what each rank holds, in rank order
  // Of a mixture of experts, for each rank: the rows each expert computed
  // there so far, over every block (docs/models.md, "Experts over ranks").
  std::vector<std::vector<std::uint64_t>> expert_rows;
  std::string kernel_path;  // the CPU kernels' path (kernels/cpu/isa.hpp)
  std::uint64_t kv_bytes_used = 0;
  std::uint64_t kv_bytes_capacity = 0;
  int position = 0;
  int context = 0;
  std::uint64_t last_epoch = 0;       // the newest transaction, committed or not
  std::uint64_t committed_epoch = 0;  // the newest committed transaction
  std::uint64_t state_epoch = 0;      // the commit that produced the current state
  std::string last_outcome;           // "none", "committed", "aborted" or "poisoned"
  std::string last_error;             // when aborted
  std::uint64_t aborted_transactions = 0;
  std::uint64_t restoration_generation = 0;
  std::string state_digest;
};

struct MaterializationReport {
  std::uint64_t weights_mapped_bytes = 0;    // the model file, mapped whole in each process that reads it
  std::uint64_t weights_resident_bytes = 0;  // the sum of the ranks' measured resident bytes
  std::vector<WeightShare> weight_shares;    // what each rank holds, in rank order
  std::uint64_t kv_allocated_bytes = 0;      // the blocks the ranks' paged caches hold now
  std::uint64_t kv_materialized_bytes = 0;   // rows ever written
  int high_water_position = 0;
};

// What a report says of the model, the kernels and the transactions: every
// field but the state's (KV, position, state epoch, digest), which the
// session fills in.
SessionReport report_of(const Model& model, const std::string& model_identity, const TransactionRecord& record);

// Adds the ranks' weight shares, in rank order, to a report.
void add_weight_shares(SessionReport& report, std::vector<WeightShare> shares);
void add_weight_shares(MaterializationReport& report, std::vector<WeightShare> shares);

struct SessionOptions {
  int threads = 1;  // of the session's own compute pool
  // Where the session computes (the CPU, or a CUDA device) and under which
  // weights budget (runtime/model/residency.hpp).
  StageOptions stage;
};

class Session {
 public:
  // With a compute pool of its own.
  explicit Session(const Model& model, const SessionOptions& options = {});
  // On `pool`, which sessions may share (serve's slots do); it must
  // outlive the session.
  Session(const Model& model, cpu::ThreadPool& pool, const StageOptions& stage = {});
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  ~Session();

  // Runs options.tokens at the current position as one transaction
  // (step_options.hpp). A prediction-target step runs the
  // prediction-target phases after OutputObservation
  // (prediction_target.hpp); without a draft it commits every token.
  Result<StepResult> step(const StepOptions& options);
  // The logits of every row.
  Result<StepResult> forward(std::span<const int> tokens) { return step({.tokens = tokens, .all_rows = true}); }
  // The last row's logits.
  Result<StepResult> prefill(std::span<const int> tokens) { return step({.tokens = tokens}); }
  Result<StepResult> decode(int token) { return step({.tokens = {&token, 1}}); }

  Result<SessionCheckpoint> checkpoint();
  Status rollback(const SessionCheckpoint& checkpoint);
  Result<CompleteCheckpoint> checkpoint_complete();
  Status rollback_complete(const CompleteCheckpoint& checkpoint);
  // Moves the state back to its first `position` tokens (0 to position()),
  // keeping their rows: a rollback to the state's own epoch at that
  // position. It is as sound as a rollback to a checkpoint taken there:
  // every row below the position was written at or before the state's
  // epoch (SessionState::rows_unchanged_since), and later steps write only
  // rows at or past the position. Checkpoints taken before stay usable
  // while their rows are unchanged. A failure leaves the state as it was.
  Status truncate(int position);
  // Empties the state; checkpoints taken before are refused afterwards.
  // The one call a poisoned session takes, and the end of its poison.
  Status reset();

  // A snapshot of the state, as one transaction: every rank shelves a
  // stable image of its state, or none does.
  Result<SessionSnapshot> snapshot();
  // What snapshot() would cost now; side-effect-free.
  SnapshotEstimate estimate_snapshot() const;
  // Returns the state to `snapshot`'s, which may come from another session
  // of the same model and partition in this process, as one transaction; a
  // failure changes nothing. Checkpoints taken before are refused
  // afterwards (but one at position 0).
  Status restore(const SessionSnapshot& snapshot);
  // A new session, computing as this one does (its pool, backend and KV
  // pool), whose state is `snapshot`'s; this session is unchanged.
  Result<Session> fork(const SessionSnapshot& snapshot) const;
  // The digest of the state's content, without its epoch: a snapshot's
  // digest equals it when taken, and after a restore of it.
  std::string content_digest() const;

  // Saves the state's first prefix.size() rows, which must hold exactly
  // `prefix`, as the live generation of the cache at `root`.
  Result<PromptCacheSaveResult> save_prompt_cache(const std::filesystem::path& root,
                                                  const PromptCacheDescriptor& descriptor, std::span<const int> prefix);
  Result<PromptCacheSaveResult> save_prompt_cache_for_input(const std::filesystem::path& root,
                                                            const PromptCacheDescriptor& descriptor,
                                                            std::span<const int> prefix,
                                                            const std::string& prepared_input);
  // Replaces the state with the cached prefix after checking that the cache
  // is for this model and topology, was saved under `expected`, and holds
  // exactly `prefix`. Refused caches leave the state untouched.
  Status load_prompt_cache(const std::filesystem::path& root, const PromptCacheDescriptor& expected,
                           std::span<const int> prefix);
  Status load_prompt_cache_for_input(const std::filesystem::path& root, const PromptCacheDescriptor& expected,
                                     std::span<const int> prefix, const std::string& prepared_input);

  SessionReport report() const;
  MaterializationReport materialization_report() const;
  std::optional<PromptInputIdentity> committed_prompt_input_identity() const;
  // Counts successful restorations: aborted steps undone and rollbacks.
  std::uint64_t successful_state_restoration_generation() const;
  // Why the session is poisoned, while it is: a failed step could not undo
  // its publication (runtime/base/error.hpp, commit_indeterminate). Every call
  // but reset() is then refused with that Poison.
  const std::optional<Poison>& poison() const;

  const Model& model() const;
  const std::string& model_identity() const;
  int position() const;
  std::span<const int> tokens() const;
  std::string state_digest() const;

  void set_failure_hook(FailureHook hook);
  // Told how long each phase's local work takes (runtime/engine/rank_participant.hpp).
  void set_phase_timer(PhaseTimer timer);
  // From now on the session's forward steps run in `batcher`'s batches
  // with other sessions' (step_batcher.hpp), except those with an observer
  // or under a weights budget; nullptr: alone. The batcher must outlive the
  // session or be replaced.
  void batch_steps_with(StepBatcher* batcher);
  // Injects faults as a distributed session's inject_faults does, on the
  // one rank (runtime/fault/fault_plan.hpp); occurrences count from now.
  Status inject_faults(const std::vector<Fault>& plan);

 private:
  Session(const Model& model, std::shared_ptr<cpu::ThreadPool> pool, const StageOptions& stage);
  Result<PromptCacheSaveResult> save(const std::filesystem::path& root, const PromptCacheDescriptor& descriptor,
                                     std::span<const int> prefix, const std::string& prepared_input);
  Status load(const std::filesystem::path& root, const PromptCacheDescriptor& expected, std::span<const int> prefix,
              const std::string& prepared_input);

  // The engine, its one rank and the record of its transactions, apart so
  // that this header names none of their types (runtime/engine).
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace accord
