#include "runtime/serve/cluster_status.hpp"

#include <chrono>
#include <utility>

namespace accord::serve {

std::string_view to_string(RankState state) {
  switch (state) {
    case RankState::ready: return "ready";
    case RankState::computing: return "computing";
    case RankState::poisoned: return "poisoned";
    case RankState::healing: return "healing";
  }
  return "ready";
}

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {

bool notable(RankState state) { return state == RankState::poisoned || state == RankState::healing; }

}  // namespace

// Tells `changed_` of a turn into or out of poisoned and healing; a slot
// turns computing and ready at every request, which the feed's period shows.
void SlotWatch::set_state(RankState state) {
  bool tell = false;
  {
    std::lock_guard lock(mutex_);
    tell = notable(state) != notable(figures_.state) || (notable(state) && state != figures_.state);
    figures_.state = state;
    if (!notable(state)) {
      poison_.reset();
      figures_.lost_rank.reset();
    }
    if (tell) {
      auto& changes = figures_.changes;
      changes.push_back({state, figures_.lost_rank, poison_ ? poison_->cause : "", unix_ms()});
      if (changes.size() > SlotFigures::kChangesKept) changes.erase(changes.begin());
    }
  }
  if (tell && changed_) changed_();
}

void SlotWatch::begin_request() {
  {
    std::lock_guard lock(mutex_);
    in_request_ = true;
    if (notable(figures_.state)) return;
  }
  set_state(RankState::computing);
}

void SlotWatch::end_request() {
  {
    std::lock_guard lock(mutex_);
    in_request_ = false;
    if (notable(figures_.state)) return;
  }
  set_state(RankState::ready);
}

void SlotWatch::end_step(const Error* error, int tokens) {
  const bool poisoned = error != nullptr && error->code() == ErrorCode::commit_indeterminate;
  {
    std::lock_guard lock(mutex_);
    if (error == nullptr) {
      ++figures_.committed_steps;
      figures_.sampled_tokens += static_cast<std::uint64_t>(tokens);
    } else if (poisoned) {
      ++figures_.poisoned_steps;
      poison_ = error->poison().value_or(Poison{error->message(), std::nullopt, error->phase(), 0});
      figures_.lost_rank = poison_->rank;
    } else {
      ++figures_.aborted_steps;
    }
  }
  if (poisoned) set_state(RankState::poisoned);
}

void SlotWatch::begin_heal() { set_state(RankState::healing); }

void SlotWatch::end_heal(const Result<HealReport>& report, double seconds) {
  HealRecord record;
  bool in_request = false;
  {
    std::lock_guard lock(mutex_);
    record.slot = slot_;
    if (poison_) {
      record.rank = poison_->rank;
      record.cause = poison_->cause;
    }
    in_request = in_request_;
  }
  record.healed = static_cast<bool>(report);
  if (report) {
    record.replaced_ranks = report->replaced_ranks;
    record.replayed_tokens = report->replayed_tokens;
  } else {
    record.cause += (record.cause.empty() ? "" : "; ") + ("healing failed: " + report.error().message());
  }
  record.seconds = seconds;
  record.unix_ms = unix_ms();
  set_state(!report ? RankState::poisoned : in_request ? RankState::computing : RankState::ready);
  if (healed_) healed_(record);
}

void SlotWatch::reset(const Status& done) {
  bool in_request = false;
  {
    std::lock_guard lock(mutex_);
    if (!done) {
      poison_ = done.error().poison().value_or(Poison{"reset failed: " + done.error().message(), std::nullopt, "", 0});
      figures_.lost_rank = poison_->rank;
    }
    in_request = in_request_;
  }
  set_state(!done ? RankState::poisoned : in_request ? RankState::computing : RankState::ready);
}

void SlotWatch::set_ranks(std::vector<RankFigures> ranks) {
  std::lock_guard lock(mutex_);
  figures_.ranks = std::move(ranks);
}

SlotFigures SlotWatch::figures() const {
  std::lock_guard lock(mutex_);
  return figures_;
}

}  // namespace accord::serve
