// The arguments a PhaseBegin carries: one struct per kind, together a
// std::variant that travels with `inspect` like every other message field.
// A phase whose arguments are not of the kind it takes is refused by the
// rank ("malformed ... arguments"); a variant index that names no kind
// arrives as NoArguments, and is refused the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "messages/variant_wire.hpp"

namespace accord {

struct NoArguments {
  bool operator==(const NoArguments&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, NoArguments&) {
  return f();
}

// StateCheckpoint of a forward step: the step's token ids.
struct StepTokens {
  std::vector<std::int32_t> tokens;
  bool operator==(const StepTokens&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StepTokens& x) {
  return f(x.tokens);
}

// Execution: whether the output owner computes the logits of every row of
// the step, or of the last one only.
struct ExecutionArguments {
  bool all_rows = false;
  bool operator==(const ExecutionArguments&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ExecutionArguments& x) {
  return f(x.all_rows);
}

// PredictionTargetCapture and PredictionTargetStatePreparation: how many
// of the step's last tokens are a draft.
struct DraftTokens {
  std::int32_t count = 0;
  bool operator==(const DraftTokens&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, DraftTokens& x) {
  return f(x.count);
}

// SessionRollbackPreparation: the checkpoint every rank must restore.
struct RollbackTarget {
  std::int32_t position = 0;
  std::uint64_t state_epoch = 0;
  std::uint64_t reset_epoch = 0;
  bool operator==(const RollbackTarget&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RollbackTarget& x) {
  return f(x.position, x.state_epoch, x.reset_epoch);
}

// SessionCheckpoint of a snapshot, SessionRollbackPreparation of a
// snapshot restore: the snapshot every rank shelves, or restores.
struct SnapshotTarget {
  std::uint64_t id = 0;
  bool operator==(const SnapshotTarget&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SnapshotTarget& x) {
  return f(x.id);
}

// The prompt-cache phases: what to save or load, and where. For a save,
// `save_id` names the new save on every rank; for PromptCacheLoadPreparation
// it is the save rank 0's live generation belongs to, which every rank's
// generation must belong to as well.
struct PromptCacheArguments {
  std::string root;
  std::string descriptor_name;
  std::string descriptor_namespace;
  std::string prepared_input;
  std::string save_id;
  std::vector<std::int32_t> prefix;

  bool operator==(const PromptCacheArguments&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PromptCacheArguments& x) {
  return f(x.root, x.descriptor_name, x.descriptor_namespace, x.prepared_input, x.save_id, x.prefix);
}

// SamplingSynchronization: how the output owner samples. The sampler's
// random stream travels as its state, so the caller's sampler and the
// owner's draw the same numbers; stop_tokens end generation when sampled.
struct SamplingArguments {
  float temperature = 1.0f;
  float top_p = 0.9f;
  std::uint64_t rng_state = 0;
  std::vector<std::int32_t> stop_tokens;

  bool operator==(const SamplingArguments&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SamplingArguments& x) {
  return f(x.temperature, x.top_p, x.rng_state, x.stop_tokens);
}

// OutputPublication: whether the output owner publishes its logits to the
// caller, or only holds them (a sampling step whose caller wants just the
// token: the logits, 128 KB a row for a 32000-token vocabulary, need not
// travel).
struct PublicationArguments {
  bool logits = true;
  bool operator==(const PublicationArguments&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PublicationArguments& x) {
  return f(x.logits);
}

using PhaseArguments = std::variant<NoArguments, StepTokens, ExecutionArguments, DraftTokens, RollbackTarget,
                                    PromptCacheArguments, SamplingArguments, PublicationArguments, SnapshotTarget>;

// PhaseArguments travel as every std::variant of the wire does
// (messages/variant_wire.hpp): an index that names no kind arrives as its
// first alternative, NoArguments.
static_assert(std::is_same_v<std::variant_alternative_t<0, PhaseArguments>, NoArguments>);

}  // namespace accord
