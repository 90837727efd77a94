// Continuous batching of single-rank sessions over one model: the forward
// steps that several sessions ask for at about the same time run as one
// batch (Transformer::forward_lanes), so a decode step reads the weights
// once for all of them instead of once each.
//
// A batch only computes. Each session still runs its own transaction
// around its step (checkpoint, sampling, commit or abort) and owns its KV
// cache, into which its lane writes; and a row computes the same bits in
// any batch, so one session's abort, retry or stop never changes another's
// tokens.
//
// Who computes: the first caller to find no batch running leads. It waits
// until every member (join) has asked for a step, or the gather window has
// passed since it began waiting, whichever is first; then it runs the
// steps asked for so far (up to kMaxBatchRows rows), on the shared pool,
// and hands each caller its output. Steps asked for meanwhile, and those
// past the rows, wait for the next batch. Members are
// the sessions generating now: one that joined and does something else
// for a while (reads a prompt cache, say) delays a batch by the window at
// most, never forever.
//
// Thread-safe: meant to be called from the threads of several sessions.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/base/error.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/transformer.hpp"

namespace accord {

class StepBatcher {
 public:
  // Long enough for a member's work between two decode steps (sampling,
  // its transaction's phases, handing the piece to its client), short
  // next to a decode step of a model worth batching.
  static constexpr std::chrono::microseconds kDefaultGatherWindow{2000};

  // A batch takes steps, in the order they were asked for, up to this many
  // rows (at least one step, however long): several long prefills do not
  // make one huge batch, whose scratch memory grows with its rows, and
  // keep the decode steps behind them waiting for all of them.
  static constexpr int kMaxBatchRows = 512;

  // model and pool must outlive the batcher.
  StepBatcher(const Model& model, cpu::ThreadPool& pool,
              std::chrono::microseconds gather_window = kDefaultGatherWindow);

  // A session starts or stops generating (a request of a serve slot).
  void join();
  void leave();

  // One session's step: tokens at positions from `position`, into `kv`
  // (which holds every unit). Its inputs must have passed check_tokens.
  struct Step {
    std::span<const int> tokens;
    int position = 0;
    KvCache* kv = nullptr;
    bool all_rows = false;  // logits for every token, not only the last
  };
  struct StepOutput {
    std::vector<float> logits;  // (1 or tokens, vocab)
    std::vector<float> hidden;  // (tokens, dim): the residual stream after the last unit
  };
  // Blocks until the batch that holds the step has run.
  Result<StepOutput> run(const Step& step);

  // Where a long batch (a prefill of many tokens) stands: after each unit.
  struct Progress {
    int rows = 0;
    int units_done = 0;
    int units = 0;
  };
  // A batch of at least this many rows tells its progress.
  static constexpr int kLongBatchRows = 64;
  // `progress` is told, on the leader's thread, after each unit of a batch
  // of kLongBatchRows rows or more. Set it before the first step.
  void set_progress(std::function<void(const Progress&)> progress) { progress_ = std::move(progress); }

  struct Stats {
    std::uint64_t batches = 0;
    std::uint64_t steps = 0;  // lanes over all batches
    int widest = 0;           // the most steps one batch held
  };
  Stats stats() const;

 private:
  struct Waiting {
    const Step* step;
    Result<StepOutput>* output;
    bool done = false;
  };

  // Runs a batch as its leader; `lock` holds mutex_ on entry and exit.
  void lead(std::unique_lock<std::mutex>& lock);
  // The next batch's steps, out of waiting_ (under mutex_).
  std::vector<Waiting*> take_batch();
  void compute(std::span<Waiting* const> batch);
  // Gives each step its rows of the batch's logits and hidden rows.
  void hand_out(std::span<Waiting* const> batch, std::span<const float> logits, std::span<const float> hidden);

  const Model& model_;
  const std::chrono::microseconds gather_window_;
  Transformer transformer_;  // the leader's only
  std::function<void(const Progress&)> progress_;

  mutable std::mutex mutex_;
  std::condition_variable arrived_;   // a step was asked for, or a member left
  std::condition_variable finished_;  // a batch ran
  std::vector<Waiting*> waiting_;     // steps for the next batches, in the order asked for
  int members_ = 0;
  bool leading_ = false;
  Stats stats_;
};

}  // namespace accord
