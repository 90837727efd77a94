#include "runtime/serve/watched_slot.hpp"

#include <chrono>
#include <utility>

namespace accord::serve {

Result<std::span<const float>> WatchedTarget::forward(std::span<const int> tokens) {
  return seen(inner_.forward(tokens), 0);
}

Result<std::span<const float>> WatchedTarget::prefill(std::span<const int> tokens) {
  return seen(inner_.prefill(tokens), 1);
}

Result<std::span<const float>> WatchedTarget::decode(int token) { return seen(inner_.decode(token), 1); }

Result<SampledToken> WatchedTarget::prefill_and_sample(std::span<const int> tokens, Sampler& sampler,
                                                       std::span<const int> stop_tokens) {
  return seen(inner_.prefill_and_sample(tokens, sampler, stop_tokens), 1);
}

Result<SampledToken> WatchedTarget::decode_and_sample(int token, Sampler& sampler, std::span<const int> stop_tokens,
                                                      NextDecode next) {
  return seen(inner_.decode_and_sample(token, sampler, stop_tokens, next), 1);
}

Result<DraftVerdict> WatchedTarget::decode_draft(int token, std::span<const int> draft) {
  auto verdict = inner_.decode_draft(token, draft);
  const int tokens = verdict ? verdict->accepted + 1 : 0;
  return seen(std::move(verdict), tokens);
}

Result<HealReport> WatchedTarget::heal() {
  watch_.begin_heal();
  const auto start = std::chrono::steady_clock::now();
  auto report = inner_.heal();
  watch_.end_heal(report, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return report;
}

WatchedSlot::WatchedSlot(std::unique_ptr<SlotSession> inner, std::shared_ptr<SlotWatch> watch)
    : inner_(std::move(inner)), watch_(std::move(watch)), target_(inner_->target(), *watch_) {
  read_ranks();
}

// A poisoned session's lost rank would not answer: its figures stay the
// last it gave.
void WatchedSlot::read_ranks() {
  if (watch_->figures().state == RankState::poisoned) return;
  if (auto ranks = inner_->rank_figures()) watch_->set_ranks(std::move(*ranks));
}

Status WatchedSlot::reset() {
  Status done = inner_->reset();
  watch_->reset(done);
  if (done) read_ranks();
  return done;
}

void WatchedSlot::begin_request() {
  watch_->begin_request();
  inner_->begin_request();
}

void WatchedSlot::end_request() {
  inner_->end_request();
  read_ranks();
  watch_->end_request();
}

}  // namespace accord::serve
