// What one forward step runs, for Session::step and DistributedSession::step:
// its tokens and what it asks for besides their logits. prefill(), decode()
// and forward() are the common cases; an observer, a prediction target or
// sampling make the others.
#pragma once

#include <memory>
#include <span>

#include "runtime/base/error.hpp"
#include "runtime/model/model.hpp"
#include "runtime/rank/observer.hpp"
#include "runtime/text/sampler.hpp"

namespace accord {

// Whether the generator will likely decode the token a decode step samples
// (it leaves room under max_tokens and the context, and it is not a stop
// token). A session may then begin that step before it is asked for it, and
// undoes it when the next call asks for something else (a distributed
// session's chained steps, docs/protocol.md).
enum class NextDecode { unlikely, likely };

struct StepOptions {
  // At the committed position; they must outlive the call.
  std::span<const int> tokens{};
  // Every row's logits (forward), or the last row's (prefill, decode).
  bool all_rows = false;
  // Lent to every rank for this step only (runtime/rank/observer.hpp): each
  // rank calls on_unit_output for its own units, the output owner calls
  // on_logits, and what on_logits leaves is what the step returns. An
  // observer's error or exception aborts the step on every rank.
  std::shared_ptr<StepObserver> observer{};
  // Speculative decoding's target step (runtime/rank/prediction_target.hpp):
  // the output owner also captures the residual stream of the last kept
  // row, and verifies the last `draft_tokens` tokens as a draft, keeping the
  // longest prefix greedy decoding would produce; the rest is rolled back.
  bool prediction_target = false;
  int draft_tokens = 0;
  // Generation: the next token is sampled from the last row's logits with
  // `sampler`'s options and random stream, and checked against
  // `stop_tokens`. On commit `sampler` has advanced exactly as sampling
  // those logits here would have advanced it; on failure it is unchanged.
  Sampler* sampler = nullptr;
  std::span<const int> stop_tokens{};
  // With a sampler: false leaves the logits where they were sampled (a
  // distributed session's output owner), and the step returns none.
  bool return_logits = true;
  // With a sampler: likely lets a distributed session chain the next
  // decode step on the sampled token.
  NextDecode next = NextDecode::unlikely;
};

// Whether `options` make a step a session of `config` at `position` can
// run: its tokens (check_tokens), its draft (at least one token before it)
// and its sampler's options.
Status check_step(const ModelConfig& config, const StepOptions& options, int position);

// Whether a session at `position` can move back to `target`
// (Session::truncate): 0 to `position`.
Status check_truncation(int target, int position);

}  // namespace accord
