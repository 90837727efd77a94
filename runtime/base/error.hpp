// Errors are values: every fallible call returns Result<T> (or Status) with
// an ErrorCode and a message meant for the person who ran the command.
// Exceptions do not cross module boundaries; only `main` exits the process.
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "runtime/base/assert.hpp"

namespace accord {

enum class ErrorCode {
  // The caller broke a documented precondition: a bad option, a token id
  // outside the vocabulary, a prompt past the context. Nothing was changed.
  contract,
  // A file could not be opened, mapped, read or written.
  io,
  // A model or tokenizer file is malformed: truncated, impossible shapes,
  // unknown format version.
  format,
  // The files are well formed but do not fit together or are not supported:
  // a vocabulary of another size than the model's, an unsupported layout.
  architecture,
  // The session's state does not allow the call: a checkpoint from another
  // session or one whose rows were overwritten, a session that is unusable.
  state,
  // A prompt cache was refused: missing, corrupted, from another model,
  // topology or prefix, an unknown format version, a path outside the root.
  prompt_cache,
  // The machinery failed while running a step: an observer threw or
  // refused, a kernel or device reported an error, an injected fault.
  mechanism,
  // The step was aborted and every change it made was undone; the epoch
  // says which transaction. The session stays usable.
  commit_aborted,
  // Restoring after a failure did not succeed, so the state can no longer
  // be proven to equal any committed state (epoch and phase say where).
  // The session refuses work until it is reset.
  commit_indeterminate,
};

std::string_view to_string(ErrorCode code);

// `text` safe to print on a terminal: control characters (C0 but newline
// and tab, DEL and the C1 range) and bytes that are not valid UTF-8 are
// written as \xNN; printable UTF-8 is kept. Error messages quote what the
// user gave (an option, ACCORD_FAULTS, a file's contents), and raw bytes
// there could move the cursor, clear the screen or retitle the terminal.
// Escaping twice changes nothing more.
std::string printable(std::string_view text);

// Why a session is poisoned (ErrorCode::commit_indeterminate): the cause in
// words, the rank it names (none for a one-rank session, or a cause that
// names no rank), and the phase and epoch where it happened.
struct Poison {
  std::string cause;
  std::optional<std::uint32_t> rank;
  std::string phase;
  std::uint64_t epoch = 0;

  bool operator==(const Poison&) const = default;
};

class Error {
 public:
  Error(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // The transaction the error belongs to, when it came out of one.
  std::optional<std::uint64_t> epoch() const { return epoch_; }
  // The phase that failed ("Execution", ...), empty when none applies.
  const std::string& phase() const { return phase_; }
  // True when the failure came before the step changed any state.
  bool before_state_mutation() const { return before_state_mutation_; }
  // Set on every error of a poisoned session: why it is poisoned.
  const std::optional<Poison>& poison() const { return poison_; }

  // The error of a poisoned session: commit_indeterminate, "the session is
  // poisoned: " and the cause, at the poison's epoch and phase.
  static Error poisoned(Poison poison) {
    Error error(ErrorCode::commit_indeterminate, "the session is poisoned: " + poison.cause);
    error.at(poison.epoch, poison.phase);
    error.poison_ = std::move(poison);
    return error;
  }

  Error& at(std::uint64_t epoch, std::string phase) {
    epoch_ = epoch;
    phase_ = std::move(phase);
    return *this;
  }
  // Adds to the message what followed the error ("; healing failed ...").
  Error& append(std::string_view more) {
    message_ += more;
    return *this;
  }

  Error& mark_before_state_mutation() {
    before_state_mutation_ = true;
    return *this;
  }

 private:
  ErrorCode code_;
  std::string message_;
  std::optional<std::uint64_t> epoch_;
  std::string phase_;
  bool before_state_mutation_ = false;
  std::optional<Poison> poison_;
};

// A value or an error; E is Error unless a call's failure carries more
// (generate's GenerationFailure keeps what was done before the error).
template <class T, class E = Error>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}
  Result(E error) : data_(std::move(error)) {}

  bool ok() const { return data_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    ACCORD_ASSERT(ok(), "the value of a Result that holds an error");
    return std::get<0>(data_);
  }
  const T& value() const& {
    ACCORD_ASSERT(ok(), "the value of a Result that holds an error");
    return std::get<0>(data_);
  }
  T&& value() && {
    ACCORD_ASSERT(ok(), "the value of a Result that holds an error");
    return std::get<0>(std::move(data_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const E& error() const {
    ACCORD_ASSERT(!ok(), "the error of a Result that holds a value");
    return std::get<1>(data_);
  }

 private:
  std::variant<T, E> data_;
};

// The result of a call that returns nothing but may fail.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), failed_(true) {}

  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const Error& error() const {
    ACCORD_ASSERT(failed_, "the error of a Status that is ok");
    return error_;
  }

 private:
  Error error_{ErrorCode::contract, {}};
  bool failed_ = false;
};

// Runs `work`, which returns a Status; an exception out of it (an
// observer's, say) becomes a mechanism error. A phase's local work runs
// inside it: its failure must reach the transaction as that phase's
// status, never unwind through a session or an actor.
template <class Work>
Status status_of(Work&& work) {
  try {
    return work();
  } catch (const std::exception& e) {
    return Error(ErrorCode::mechanism, std::string("exception: ") + e.what());
  } catch (...) {
    return Error(ErrorCode::mechanism, "exception of an unknown type");
  }
}

}  // namespace accord
