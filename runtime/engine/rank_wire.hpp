// What a rank's local work and the protocol's wire types say to each
// other, the same on every transport (the direct engine, the rank actors).
// CAF-free.
#pragma once

#include <optional>
#include <string>

#include "messages/phase_arguments.hpp"
#include "messages/protocol.hpp"
#include "runtime/agreement/rank_agreement.hpp"
#include "runtime/base/error.hpp"
#include "runtime/fault/fault_plan.hpp"
#include "runtime/rank/prompt_cache_shard.hpp"
#include "runtime/rank/rank_worker.hpp"

namespace accord {

// A phase whose arguments are not of the kind it takes is refused.
Error malformed(const std::string& what);

// A prompt-cache phase's arguments as the request of prompt_cache_shard.hpp.
PromptCacheRequest to_request(const PromptCacheArguments& arguments);

WireTensor to_wire(RowBlock block);
RowBlock from_wire(WireTensor tensor);

// The output owner's pick with the caller's sampling arguments; the seed
// only starts a random stream, which the arguments' rng_state continues.
Result<SamplingResult> sample_on(RankWorker& worker, const SamplingArguments& arguments);

// The capture and verdict the output owner publishes, as sent.
Result<PredictionTargetHidden> published_capture(const RankWorker& worker);
// The capture as a rank other than the output owner holds it.
PredictionTargetState received_capture(const PredictionTargetHidden& capture);

// What the `drop` and `corrupt` faults mark when they fire, to act on
// later: the status a drop loses, and the phase after whose local work a
// corrupt damages the shard just written (as a failing disk would, so only
// a later load can notice).
class FaultMarks {
 public:
  // Marks `run` for a drop or a corrupt fault; other kinds mark nothing.
  void mark(FaultKind kind, const RunPhase& run);
  // Whether `message` is the status a drop loses; true once.
  bool lose(const RankMessage& message);
  // Whether the shard is to be damaged now that `run`'s work succeeded; true once.
  bool corrupt_after(const RunPhase& run);

 private:
  std::optional<RunPhase> status_to_drop_;
  std::optional<RunPhase> shard_to_corrupt_;
};

// What an injected fault of `kind` says when it fires.
std::string injected_fault_message(FaultKind kind, int rank, const PhaseId& phase);

}  // namespace accord
