// The single-rank transactional session: the user's handle on a model's
// text state. Every operation is a transaction with an epoch that only
// grows. It runs its phases (phase.hpp) in order; when any of them fails,
// the session restores exactly the state it had before and returns a typed
// error carrying the epoch and the phase. Nothing a failed step did remains.
//
// Threading: one call at a time; the session owns its state, borrows the
// model and the rank's thread pool (both must outlive it).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/error.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/transformer.hpp"
#include "runtime/session/observer.hpp"
#include "runtime/session/phase.hpp"
#include "runtime/session/prediction_target.hpp"
#include "runtime/session/prompt_cache.hpp"
#include "runtime/session/prompt_cache_shard.hpp"
#include "runtime/session/prompt_input.hpp"
#include "runtime/session/rank_stage.hpp"
#include "runtime/session/state.hpp"
#include "runtime/session/transaction_record.hpp"

namespace accord {

// Called after each phase's local work; an error (or exception) fails the
// phase as if the work had. Tests and fault scenarios use it.
using FailureHook = std::function<Status(Phase phase, std::uint64_t epoch)>;

// The output of a forward step. logits: (rows, vocab), valid until the next
// call on the session.
struct StepResult {
  std::uint64_t epoch = 0;
  int first_position = 0;
  int rows = 0;
  std::span<const float> logits;
};

// A prediction-target step's output (prediction_target.hpp): the logits of
// the last kept row and its prediction-target capture (the final hidden
// state, (dim)), both valid until the next call on the session; how many
// draft tokens it kept, and greedy decoding's token after them.
struct PredictionTargetResult {
  StepResult step;
  std::span<const float> capture;
  int accepted = 0;
  int next_token = -1;
};

// An opaque point to come back to with rollback().
struct SessionCheckpoint {
  std::uint64_t session_id = 0;
  std::uint64_t reset_count = 0;
  int position = 0;
  std::uint64_t state_epoch = 0;
  std::string digest;  // of the state when taken
};

struct CompleteCheckpoint {
  SessionCheckpoint state;
  std::optional<PromptInputIdentity> prompt;
};

struct SessionReport {
  std::string model_identity;
  std::uint64_t weights_bytes = 0;
  std::uint64_t weights_resident_bytes = 0;
  std::string weights_residency;  // "memory-mapped"
  std::map<std::string, std::uint64_t> weights_bytes_by_type;  // as held in memory: "F32", "Q8_0", ...
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
  std::uint64_t weights_mapped_bytes = 0;
  std::uint64_t weights_resident_bytes = 0;
  std::uint64_t kv_allocated_bytes = 0;
  std::uint64_t kv_materialized_bytes = 0;  // rows ever written
  int high_water_position = 0;
};

struct PromptCacheSaveResult {
  std::uint64_t epoch = 0;
  std::string generation;
  int prefix_token_count = 0;
  std::uint64_t shard_bytes = 0;
};

// What a report says of the model, the kernels and the transactions: every
// field but the state's (KV, position, state epoch, digest), which the
// session fills in.
SessionReport report_of(const Model& model, const std::string& model_identity, const TransactionRecord& record);

class Session {
 public:
  Session(const Model& model, cpu::ThreadPool& pool);

  // Runs tokens at the current position; returns the logits of every row.
  Result<StepResult> forward(std::span<const int> tokens);
  Result<StepResult> forward_with_observer(std::span<const int> tokens, StepObserver& observer);
  // Runs tokens at the current position; returns the last row's logits.
  Result<StepResult> prefill(std::span<const int> tokens);
  Result<StepResult> prefill_with_observer(std::span<const int> tokens, StepObserver& observer);
  Result<StepResult> decode(int token);
  Result<StepResult> decode_with_observer(int token, StepObserver& observer);
  // Prefill and decode for speculative decoding's target model, which also
  // capture the final hidden state and, in the _input forms, verify a
  // draft: the prediction-target phases after OutputObservation
  // (prediction_target.hpp). Without a draft they commit every token.
  Result<PredictionTargetResult> prefill_prediction_target(std::span<const int> tokens);
  Result<PredictionTargetResult> decode_prediction_target(int token);
  Result<PredictionTargetResult> prefill_prediction_target_input(const PredictionTargetInput& input);
  // One token, then the draft.
  Result<PredictionTargetResult> decode_prediction_target_input(const PredictionTargetInput& input);

  Result<SessionCheckpoint> checkpoint();
  Status rollback(const SessionCheckpoint& checkpoint);
  Result<CompleteCheckpoint> checkpoint_complete();
  Status rollback_complete(const CompleteCheckpoint& checkpoint);
  // Empties the state; checkpoints taken before are refused afterwards.
  // The one call a poisoned session takes, and the end of its poison.
  Status reset();

  // Saves the state's first prefix.size() rows, which must hold exactly
  // `prefix`, as the live generation of the cache at `root`.
  Result<PromptCacheSaveResult> save_prompt_cache(const std::filesystem::path& root,
                                                  const PromptCacheDescriptor& descriptor,
                                                  std::span<const int> prefix);
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
  std::uint64_t successful_state_restoration_generation() const { return record_.restoration_generation; }
  // Why the session is poisoned, while it is: a failed step could not undo
  // its publication (runtime/error.hpp, commit_indeterminate). Every call
  // but reset() is then refused with that Poison.
  const std::optional<Poison>& poison() const { return poison_; }

  const Model& model() const { return model_; }
  const std::string& model_identity() const { return model_identity_; }
  int position() const { return state().position(); }
  std::span<const int> tokens() const { return state().tokens(); }
  std::string state_digest() const { return state().digest(); }

  void set_failure_hook(FailureHook hook) { failure_hook_ = std::move(hook); }

 private:
  class Transaction;

  SessionState& state() { return stage_.state(); }
  const SessionState& state() const { return stage_.state(); }
  // A forward step; a prediction-target step when draft_tokens is set.
  Result<StepResult> run_step(std::span<const int> tokens, Transformer::Rows rows, StepObserver* observer,
                              std::optional<int> draft_tokens = std::nullopt);
  Result<PredictionTargetResult> run_prediction_target_step(const PredictionTargetInput& input, bool decode);
  // PredictionTargetCapture to PredictionExtensionExecution; leaves
  // `logits` at the last kept row.
  Status prediction_target_phases(Transaction& tx, std::span<const int> tokens, int draft_tokens,
                                  std::span<float>& logits);
  Result<PromptCacheSaveResult> save(const std::filesystem::path& root, const PromptCacheDescriptor& descriptor,
                                     std::span<const int> prefix, const std::string& prepared_input);
  Status load(const std::filesystem::path& root, const PromptCacheDescriptor& expected, std::span<const int> prefix,
              const std::string& prepared_input);
  Status check_checkpoint(const SessionCheckpoint& checkpoint) const;
  Status refuse_if_poisoned() const;
  PromptCacheRequest cache_request(const std::filesystem::path& root, const PromptCacheDescriptor& descriptor,
                                   std::span<const int> prefix, const std::string& prepared_input) const;

  const Model& model_;
  RankStage stage_;  // every unit: one rank
  std::string model_identity_;
  ShardIdentity shard_identity_;  // the one rank's, for the prompt cache
  std::uint64_t session_id_;
  std::uint64_t next_epoch_ = 1;
  std::uint64_t reset_count_ = 0;
  TransactionRecord record_;
  std::optional<Poison> poison_;
  PreparedInputRecord prepared_;  // cleared when the state no longer holds its tokens
  std::vector<float> published_;                 // (rows, vocab) of the last step
  PredictionTargetState prediction_;  // of the last prediction-target step
  FailureHook failure_hook_;
};

}  // namespace accord
