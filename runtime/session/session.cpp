#include "runtime/session/session.hpp"

#include <random>

#include "kernels/cpu/isa.hpp"
#include "runtime/io/digest.hpp"
#include "runtime/model/identity.hpp"

namespace accord {

namespace {

std::uint64_t random_u64() {
  std::random_device random;
  return (static_cast<std::uint64_t>(random()) << 32) | random();
}

Error before_mutation(ErrorCode code, const std::string& message) {
  return std::move(Error(code, message).mark_before_state_mutation());
}

}  // namespace

// One transaction: a fresh epoch, phases run in order, then commit; any
// failure undoes what the transaction changed and returns a typed error.
class Session::Transaction {
 public:
  Transaction(Session& session, std::string operation)
      : session_(session),
        operation_(std::move(operation)),
        epoch_(session.next_epoch_++),
        prepared_(session.prepared_),
        reset_count_(session.reset_count_) {}

  std::uint64_t epoch() const { return epoch_; }

  // Saves what the transaction may overwrite, so abort can put it back.
  void protect_rows(int first, int count) { undo_ = session_.state().capture_rows(first, count); }
  // A prediction-target step's lane: puts back the rows the verdict rejects.
  void drop_rejected_rows(const PredictionTargetState& verdict) {
    accord::drop_rejected_rows(session_.state(), *undo_, verdict);
  }
  // Something to reverse on abort besides the state (a publication).
  void on_abort(std::function<Status()> reverse) { reverse_ = std::move(reverse); }

  // Runs the local work of `phase`, then the failure hook. An exception is
  // a failed phase too.
  Status phase(Phase phase, const std::function<Status()>& work) {
    current_ = phase;
    return status_of([&] {
      if (Status s = work(); !s) return s;
      if (session_.failure_hook_) return session_.failure_hook_(phase, epoch_);
      return Status{};
    });
  }

  // Runs the phases after the work: mechanism completion, then Commit with
  // `install` (which makes provisional state authoritative). Returns the
  // failure, already aborted, or success with the epoch committed.
  Status commit(const std::function<void()>& install) {
    if (Status s = phase(Phase::MechanismCompletion, [] { return Status{}; }); !s) return abort(s.error());
    if (Status s = phase(Phase::Commit, [&] {
          install();
          return Status{};
        });
        !s) {
      return abort(s.error());
    }
    session_.record_.committed(epoch_);
    return {};
  }

  // Undoes the transaction and returns `cause` tagged with epoch and phase.
  Error abort(const Error& cause) {
    const std::string phase_name(to_string(current_));
    if (undo_) session_.state().restore(*undo_);
    session_.prepared_ = prepared_;
    session_.reset_count_ = reset_count_;
    // A failure of the commit itself is reported as the commit aborting;
    // earlier failures keep the kind of their cause.
    const ErrorCode code = current_ == Phase::Commit ? ErrorCode::commit_aborted : cause.code();
    Error error(code, operation_ + " aborted at epoch " + std::to_string(epoch_) + " in " + phase_name + ": " +
                          cause.message());
    error.at(epoch_, phase_name);
    session_.record_.aborted(epoch_, error.message(), undo_.has_value());
    if (reverse_) {
      if (Status reversed = reverse_(); !reversed) {
        // The files may hold the publication or not: no state can be
        // proven, and the session refuses work until it is reset.
        session_.poison_ = Poison{error.message() + "; undoing its publication failed too: " +
                                      reversed.error().message(),
                                  std::nullopt, phase_name, epoch_};
        error = Error::poisoned(*session_.poison_);
        session_.record_.poisoned(epoch_, error.message());
      }
    }
    return error;
  }

 private:
  Session& session_;
  std::string operation_;
  std::uint64_t epoch_;
  Phase current_ = Phase::StateCheckpoint;
  std::optional<SessionState::Undo> undo_;
  std::function<Status()> reverse_;
  // Session fields a commit may change, as they were before.
  PreparedInputRecord prepared_;
  std::uint64_t reset_count_;
};

Session::Session(const Model& model, cpu::ThreadPool& pool)
    : model_(model),
      stage_(model, pool, Partition::balanced(model.config().n_layers, 1).value(), 0),
      model_identity_(accord::model_identity(model)),
      shard_identity_(shard_identity(model_identity_, model.config(), 1, 0, stage_.units())),
      session_id_(random_u64()) {}

// ---------------------------------------------------------------------------
// Forward steps: StateCheckpoint, Execution, OutputObservation,
// [PredictionTargetCapture, PredictionTargetCapturePublication,
// PredictionTargetStatePreparation, PredictionExtensionExecution,]
// OutputPublication, MechanismCompletion, Commit.

Result<StepResult> Session::forward(std::span<const int> tokens) {
  return run_step(tokens, Transformer::Rows::all, nullptr);
}
Result<StepResult> Session::forward_with_observer(std::span<const int> tokens, StepObserver& observer) {
  return run_step(tokens, Transformer::Rows::all, &observer);
}
Result<StepResult> Session::prefill(std::span<const int> tokens) {
  return run_step(tokens, Transformer::Rows::last, nullptr);
}
Result<StepResult> Session::prefill_with_observer(std::span<const int> tokens, StepObserver& observer) {
  return run_step(tokens, Transformer::Rows::last, &observer);
}
Result<StepResult> Session::decode(int token) { return run_step({&token, 1}, Transformer::Rows::last, nullptr); }
Result<StepResult> Session::decode_with_observer(int token, StepObserver& observer) {
  return run_step({&token, 1}, Transformer::Rows::last, &observer);
}

Result<PredictionTargetResult> Session::prefill_prediction_target(std::span<const int> tokens) {
  return run_prediction_target_step({{tokens.begin(), tokens.end()}, 0}, false);
}
Result<PredictionTargetResult> Session::decode_prediction_target(int token) {
  return run_prediction_target_step({{token}, 0}, true);
}
Result<PredictionTargetResult> Session::prefill_prediction_target_input(const PredictionTargetInput& input) {
  return run_prediction_target_step(input, false);
}
Result<PredictionTargetResult> Session::decode_prediction_target_input(const PredictionTargetInput& input) {
  return run_prediction_target_step(input, true);
}

Result<PredictionTargetResult> Session::run_prediction_target_step(const PredictionTargetInput& input, bool decode) {
  if (Status ok = check_prediction_input(input, decode); !ok) {
    return before_mutation(ok.error().code(), ok.error().message());
  }
  const auto rows = input.draft_tokens > 0 ? Transformer::Rows::all : Transformer::Rows::last;
  auto step = run_step(input.tokens, rows, nullptr, input.draft_tokens);
  if (!step) return step.error();
  return PredictionTargetResult{*step, prediction_.hidden, prediction_.accepted, prediction_.next_token};
}

Status Session::refuse_if_poisoned() const {
  if (poison_) return Error::poisoned(*poison_);
  return {};
}

Result<StepResult> Session::run_step(std::span<const int> tokens, Transformer::Rows rows, StepObserver* observer,
                                     std::optional<int> draft_tokens) {
  if (Status ok = refuse_if_poisoned(); !ok) return ok.error();
  const int first = state().position();
  if (Status ok = stage_.check_step(tokens, {}); !ok) {
    return before_mutation(ok.error().code(), ok.error().message());
  }
  Transaction tx(*this, "forward step");
  tx.protect_rows(first, static_cast<int>(tokens.size()));
  std::span<float> logits;
  if (Status s = tx.phase(Phase::StateCheckpoint, [] { return Status{}; }); !s) return tx.abort(s.error());
  if (Status s = tx.phase(Phase::Execution, [&] { return stage_.execute(tokens, {}, observer); }); !s) {
    return tx.abort(s.error());
  }
  if (Status s = tx.phase(Phase::OutputObservation,
                          [&] {
                            auto observed = stage_.observed_logits(rows, observer);
                            if (!observed) return Status(observed.error());
                            logits = *observed;
                            return Status{};
                          });
      !s) {
    return tx.abort(s.error());
  }
  std::span<const int> kept = tokens;
  if (draft_tokens) {
    if (Status s = prediction_target_phases(tx, tokens, *draft_tokens, logits); !s) return tx.abort(s.error());
    kept = tokens.first(static_cast<std::size_t>(prediction_.kept_rows));
  }
  if (Status s = tx.phase(Phase::OutputPublication,
                          [&] {
                            published_.assign(logits.begin(), logits.end());
                            return Status{};
                          });
      !s) {
    return tx.abort(s.error());
  }
  if (Status s = tx.commit([&] { state().commit_rows(first, kept, tx.epoch()); }); !s) return s.error();
  const int n = static_cast<int>(published_.size()) / model_.config().vocab_size;
  return StepResult{tx.epoch(), first + static_cast<int>(kept.size()) - n, n, published_};
}

Status Session::prediction_target_phases(Transaction& tx, std::span<const int> tokens, int draft_tokens,
                                         std::span<float>& logits) {
  PredictionTargetState verdict;
  const int step_rows = static_cast<int>(tokens.size());
  if (Status s = tx.phase(Phase::PredictionTargetCapture,
                          [&] {
                            verdict = verify_draft(stage_, logits, tokens, draft_tokens);
                            return Status{};
                          });
      !s) {
    return s;
  }
  if (Status s = tx.phase(Phase::PredictionTargetCapturePublication,
                          [&] {
                            prediction_ = std::move(verdict);
                            return Status{};
                          });
      !s) {
    return s;
  }
  if (Status s = tx.phase(Phase::PredictionTargetStatePreparation,
                          [&] { return check_lane_swap(prediction_, step_rows, draft_tokens); });
      !s) {
    return s;
  }
  return tx.phase(Phase::PredictionExtensionExecution, [&] {
    tx.drop_rejected_rows(prediction_);
    const int vocab = model_.config().vocab_size;
    const int logit_rows = static_cast<int>(logits.size()) / vocab;
    const std::size_t offset = kept_row_offset(prediction_, step_rows, logit_rows, vocab);
    logits = logits.subspan(offset, static_cast<std::size_t>(vocab));
    return Status{};
  });
}

// ---------------------------------------------------------------------------
// Checkpoints, rollback, reset.

Result<SessionCheckpoint> Session::checkpoint() {
  if (Status ok = refuse_if_poisoned(); !ok) return ok.error();
  Transaction tx(*this, "checkpoint");
  SessionCheckpoint cp;
  if (Status s = tx.phase(Phase::SessionCheckpoint,
                          [&] {
                            cp = {session_id_, reset_count_, state().position(), state().state_epoch(), state().digest()};
                            return Status{};
                          });
      !s) {
    return tx.abort(s.error());
  }
  if (Status s = tx.commit([] {}); !s) return s.error();
  return cp;
}

Result<CompleteCheckpoint> Session::checkpoint_complete() {
  auto state = checkpoint();
  if (!state) return state.error();
  return CompleteCheckpoint{*state, committed_prompt_input_identity()};
}

Status Session::check_checkpoint(const SessionCheckpoint& cp) const {
  if (cp.session_id != session_id_) return Error(ErrorCode::state, "the checkpoint belongs to another session");
  if (cp.reset_count != reset_count_) {
    return Error(ErrorCode::state, "the checkpoint was taken before the session was reset");
  }
  if (!state().rows_unchanged_since(cp.position, cp.state_epoch)) {
    return Error(ErrorCode::state, "rows below the checkpoint's position " + std::to_string(cp.position) +
                                       " were overwritten after it was taken");
  }
  return {};
}

Status Session::rollback(const SessionCheckpoint& checkpoint) {
  if (Status ok = refuse_if_poisoned(); !ok) return ok;
  Transaction tx(*this, "rollback");
  tx.protect_rows(0, 0);
  if (Status s = tx.phase(Phase::SessionRollbackPreparation, [&] { return check_checkpoint(checkpoint); }); !s) {
    return tx.abort(s.error());
  }
  if (Status s = tx.commit([&] {
        state().rewind(checkpoint.position, checkpoint.state_epoch);
        prepared_.keep_within(state().position());
      });
      !s) {
    return s;
  }
  ++record_.restoration_generation;
  return {};
}

Status Session::rollback_complete(const CompleteCheckpoint& checkpoint) {
  if (Status ok = check_prompt_matches_position(checkpoint.prompt, checkpoint.state.position); !ok) return ok;
  if (Status s = rollback(checkpoint.state); !s) return s;
  prepared_.restore(checkpoint.prompt);
  return {};
}

Status Session::reset() {
  Transaction tx(*this, "reset");
  tx.protect_rows(0, 0);
  if (Status s = tx.phase(Phase::SessionResetPreparation, [] { return Status{}; }); !s) return tx.abort(s.error());
  return tx.commit([&] {
    state().rewind(0, tx.epoch());
    prepared_.clear();
    ++reset_count_;
    poison_.reset();
  });
}

// ---------------------------------------------------------------------------
// Prompt cache: this rank's shard (prompt_cache_shard.hpp) inside one transaction.

PromptCacheRequest Session::cache_request(const std::filesystem::path& root, const PromptCacheDescriptor& descriptor,
                                          std::span<const int> prefix, const std::string& prepared_input) const {
  return {root, descriptor, {prefix.begin(), prefix.end()}, prepared_input};
}

Result<PromptCacheSaveResult> Session::save_prompt_cache(const std::filesystem::path& root,
                                                         const PromptCacheDescriptor& descriptor,
                                                         std::span<const int> prefix) {
  return save(root, descriptor, prefix, "");
}

Result<PromptCacheSaveResult> Session::save_prompt_cache_for_input(const std::filesystem::path& root,
                                                                   const PromptCacheDescriptor& descriptor,
                                                                   std::span<const int> prefix,
                                                                   const std::string& prepared_input) {
  if (Status ok = check_prepared_input_named(prepared_input); !ok) return ok.error();
  return save(root, descriptor, prefix, prepared_input);
}

Result<PromptCacheSaveResult> Session::save(const std::filesystem::path& root,
                                            const PromptCacheDescriptor& descriptor, std::span<const int> prefix,
                                            const std::string& prepared_input) {
  if (Status ok = refuse_if_poisoned(); !ok) return ok.error();
  Transaction tx(*this, "prompt cache save");
  const PromptCacheRequest request = cache_request(root, descriptor, prefix, prepared_input);
  ShardSave save;
  if (Status s = tx.phase(Phase::PromptCacheSavePreflight, [&] { return check_prefix_held(state(), prefix); }); !s) {
    return tx.abort(s.error());
  }
  if (Status s = tx.phase(Phase::PromptCacheSavePreparation,
                          [&] {
                            const auto shard = pack_shard(state(), static_cast<int>(prefix.size()));
                            return save.prepare(shard_identity_, request, tx.epoch(), new_save_id(), shard);
                          });
      !s) {
    return tx.abort(s.error());
  }
  tx.on_abort([&] { return save.revert(); });
  if (Status s = tx.phase(Phase::PromptCacheSavePublication, [&] { return save.publish(); }); !s) {
    return tx.abort(s.error());
  }
  if (Status s = tx.commit([&] { save.commit(); }); !s) return s.error();
  return PromptCacheSaveResult{tx.epoch(), save.generation(), static_cast<int>(prefix.size()), save.shard_bytes()};
}

Status Session::load_prompt_cache(const std::filesystem::path& root, const PromptCacheDescriptor& expected,
                                  std::span<const int> prefix) {
  return load(root, expected, prefix, "");
}

Status Session::load_prompt_cache_for_input(const std::filesystem::path& root, const PromptCacheDescriptor& expected,
                                            std::span<const int> prefix, const std::string& prepared_input) {
  if (Status ok = check_prepared_input_named(prepared_input); !ok) return ok.error();
  return load(root, expected, prefix, prepared_input);
}

Status Session::load(const std::filesystem::path& root, const PromptCacheDescriptor& expected,
                     std::span<const int> prefix, const std::string& prepared_input) {
  if (Status ok = refuse_if_poisoned(); !ok) return ok;
  if (Status ok = stage_.check_tokens(prefix, 0); !ok) {
    return before_mutation(ok.error().code(), ok.error().message());
  }
  Transaction tx(*this, "prompt cache load");
  tx.protect_rows(0, static_cast<int>(prefix.size()));
  const PromptCacheRequest request = cache_request(root, expected, prefix, prepared_input);
  ShardLoad load;
  std::vector<float> shard;
  if (Status s = tx.phase(Phase::PromptCacheLoadPreflight, [&] { return load.preflight(shard_identity_, request); });
      !s) {
    return tx.abort(s.error());
  }
  if (Status s = tx.phase(Phase::PromptCacheLoadPreparation,
                          [&]() -> Status {
                            // One rank: its generation is the whole save.
                            auto read = load.read(shard_identity_, load.save_id());
                            if (!read) return read.error();
                            shard = std::move(*read);
                            return {};
                          });
      !s) {
    return tx.abort(s.error());
  }
  return tx.commit([&] {
    install_shard(state(), shard, prefix, tx.epoch());
    prepared_.clear();
    if (!prepared_input.empty()) prepared_.set(prepared_input, static_cast<int>(prefix.size()));
  });
}

// ---------------------------------------------------------------------------
// Reports.

std::optional<PromptInputIdentity> Session::committed_prompt_input_identity() const {
  return prepared_.describe(state().tokens());
}

SessionReport report_of(const Model& model, const std::string& model_identity, const TransactionRecord& record) {
  SessionReport r;
  r.model_identity = model_identity;
  r.weights_bytes = model.file_bytes();
  r.weights_resident_bytes = model.resident_bytes();
  r.weights_residency = "memory-mapped";
  r.weights_bytes_by_type = model.weight_bytes_by_type();
  r.kernel_path = cpu::to_string(cpu::active_isa());
  r.context = model.config().seq_len;
  r.last_epoch = record.last_epoch;
  r.committed_epoch = record.committed_epoch;
  r.last_outcome = record.last_outcome;
  r.last_error = record.last_error;
  r.aborted_transactions = record.aborted_transactions;
  r.restoration_generation = record.restoration_generation;
  return r;
}

SessionReport Session::report() const {
  SessionReport r = report_of(model_, model_identity_, record_);
  r.kv_bytes_used = state().used_bytes();
  r.kv_bytes_capacity = state().kv().capacity_bytes();
  r.position = state().position();
  r.state_epoch = state().state_epoch();
  r.state_digest = state().digest();
  return r;
}

MaterializationReport Session::materialization_report() const {
  const KvCache& kv = state().kv();
  MaterializationReport r;
  r.weights_mapped_bytes = model_.file_bytes();
  r.weights_resident_bytes = model_.resident_bytes();
  r.kv_allocated_bytes = kv.capacity_bytes();
  r.kv_materialized_bytes = static_cast<std::uint64_t>(state().high_water()) * kv.position_bytes();
  r.high_water_position = state().high_water();
  return r;
}

}  // namespace accord
