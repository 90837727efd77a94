#include "runtime/rank/step_batcher.hpp"

#include <algorithm>
#include <exception>
#include <string>

namespace accord {

StepBatcher::StepBatcher(const Model& model, cpu::ThreadPool& pool, std::chrono::microseconds gather_window)
    : model_(model), gather_window_(gather_window), transformer_(model, pool) {}

void StepBatcher::join() {
  std::lock_guard lock(mutex_);
  ++members_;
}

void StepBatcher::leave() {
  {
    std::lock_guard lock(mutex_);
    --members_;
  }
  arrived_.notify_all();  // a leader may wait for this member no longer
}

StepBatcher::Stats StepBatcher::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

Result<StepBatcher::StepOutput> StepBatcher::run(const Step& step) {
  Result<StepOutput> output = Error(ErrorCode::mechanism, "the batched step did not run");
  Waiting me{&step, &output};
  std::unique_lock lock(mutex_);
  waiting_.push_back(&me);
  arrived_.notify_all();
  while (!me.done) {
    if (leading_) {
      finished_.wait(lock);
    } else {
      lead(lock);
    }
  }
  return output;
}

void StepBatcher::lead(std::unique_lock<std::mutex>& lock) {
  leading_ = true;
  arrived_.wait_for(lock, gather_window_,
                    [this] { return waiting_.size() >= static_cast<std::size_t>(std::max(members_, 1)); });
  const std::vector<Waiting*> batch = take_batch();
  ++stats_.batches;
  stats_.steps += batch.size();
  stats_.widest = std::max(stats_.widest, static_cast<int>(batch.size()));
  lock.unlock();
  compute(batch);
  lock.lock();
  for (Waiting* waiting : batch) waiting->done = true;
  leading_ = false;
  finished_.notify_all();
}

std::vector<StepBatcher::Waiting*> StepBatcher::take_batch() {
  std::size_t taken = 0, rows = 0;
  while (taken < waiting_.size()) {
    rows += waiting_[taken]->step->tokens.size();
    if (taken > 0 && rows > static_cast<std::size_t>(kMaxBatchRows)) break;
    ++taken;
  }
  std::vector<Waiting*> batch(waiting_.begin(), waiting_.begin() + static_cast<std::ptrdiff_t>(taken));
  waiting_.erase(waiting_.begin(), waiting_.begin() + static_cast<std::ptrdiff_t>(taken));
  return batch;
}

void StepBatcher::compute(std::span<Waiting* const> batch) {
  std::vector<Transformer::Lane> lanes;
  int rows = 0;
  for (const Waiting* waiting : batch) {
    const Step& step = *waiting->step;
    lanes.push_back({step.tokens, step.position, step.kv, step.all_rows});
    rows += static_cast<int>(step.tokens.size());
  }
  std::function<void(int)> after_unit;
  if (progress_ && rows >= kLongBatchRows) {
    after_unit = [this, rows](int done) { progress_({rows, done, model_.config().n_layers}); };
  }
  try {
    const std::span<const float> logits = transformer_.forward_lanes(lanes, after_unit);
    hand_out(batch, logits, transformer_.hidden());
  } catch (const std::exception& e) {
    const Error failed(ErrorCode::mechanism, std::string("the batched step failed: ") + e.what());
    for (Waiting* waiting : batch) *waiting->output = failed;
  }
}

void StepBatcher::hand_out(std::span<Waiting* const> batch, std::span<const float> logits,
                           std::span<const float> hidden) {
  const auto vocab = static_cast<std::size_t>(model_.config().vocab_size);
  const auto dim = static_cast<std::size_t>(model_.config().dim);
  for (Waiting* waiting : batch) {
    const Step& step = *waiting->step;
    const std::size_t rows = step.tokens.size(), logits_rows = step.all_rows ? rows : 1;
    StepOutput out;
    out.logits.assign(logits.begin(), logits.begin() + static_cast<std::ptrdiff_t>(logits_rows * vocab));
    out.hidden.assign(hidden.begin(), hidden.begin() + static_cast<std::ptrdiff_t>(rows * dim));
    *waiting->output = std::move(out);
    logits = logits.subspan(logits_rows * vocab);
    hidden = hidden.subspan(rows * dim);
  }
}

}  // namespace accord
