// What `accord serve` knows of its cluster as it runs: each slot's ranks,
// their state and what they hold, and the heals. A SlotWatch per slot is
// told by the slot's own thread what its session does (watched_slot.hpp);
// Metrics (metrics.hpp) reads every watch into one MetricsSnapshot, which
// both /metrics and the status page's event stream are written from.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/session/heal_report.hpp"

namespace accord::serve {

// Now, in milliseconds since the Unix epoch: when a change, a heal or a
// snapshot happened, as the status page shows it.
std::int64_t unix_ms();

// A rank's state, as its slot's session last showed it.
enum class RankState {
  ready,      // idle and usable
  computing,  // its slot is generating a request
  poisoned,   // a step poisoned the session (a rank was lost): it refuses work until healed or reset
  healing,    // the session is being healed: lost ranks restarted, committed tokens replayed
};
std::string_view to_string(RankState state);
inline constexpr RankState kRankStates[] = {RankState::ready, RankState::computing, RankState::poisoned,
                                            RankState::healing};

// What one rank holds, as its session last reported it.
struct RankFigures {
  std::string node;                 // where it runs: HOST:PORT of an `accord node`; empty: this process
  int first_layer = 0;              // its units: [first_layer, first_layer + layers)
  int layers = 0;                   // 0: not known
  std::uint64_t weights_bytes = 0;  // its tensors as held in memory
  std::uint64_t kv_bytes = 0;       // its keys and values in use
  // Of a mixture of experts: the rows each expert computed on the rank so
  // far, over every block (empty for a dense model).
  std::vector<std::uint64_t> expert_rows;

  bool operator==(const RankFigures&) const = default;
};

// A slot's turn into poisoned or healing, or out of them.
struct StateChange {
  RankState state = RankState::ready;
  std::optional<std::uint32_t> lost_rank;
  std::string cause;  // the poison's, into poisoned or healing
  std::int64_t unix_ms = 0;
};

// A slot's session: its state, the rank a poison named, its ranks, and
// what its steps came to.
struct SlotFigures {
  static constexpr std::size_t kChangesKept = 16;

  RankState state = RankState::ready;
  std::optional<std::uint32_t> lost_rank;  // while poisoned or healing: the rank the poison named
  std::vector<RankFigures> ranks;
  std::uint64_t committed_steps = 0;  // forward steps (transactions) that committed
  std::uint64_t aborted_steps = 0;    // that aborted, every rank restored
  std::uint64_t poisoned_steps = 0;   // that poisoned the session
  std::uint64_t sampled_tokens = 0;   // tokens sampled from committed steps
  // The last kChangesKept turns into poisoned or healing and out, oldest
  // first: a poison that a reset clears at once still shows here.
  std::vector<StateChange> changes;
};

// One heal of a slot's session, or one that failed.
struct HealRecord {
  int slot = 0;
  std::optional<std::uint32_t> rank;  // the rank the poison named
  std::string cause;                  // the poison's, in words
  bool healed = false;
  int replaced_ranks = 0;
  int replayed_tokens = 0;
  double seconds = 0;        // it took
  std::int64_t unix_ms = 0;  // when it ended
};

// One slot's figures, told by the slot's thread and read by any. Each
// method locks; `changed` (may be empty) is called, outside the lock, when
// the state turns poisoned, healing or back, and `healed` after each heal.
class SlotWatch {
 public:
  SlotWatch(int slot, std::function<void()> changed, std::function<void(const HealRecord&)> healed)
      : slot_(slot), changed_(std::move(changed)), healed_(std::move(healed)) {}

  int slot() const { return slot_; }
  // A request begins or ends on the slot.
  void begin_request();
  void end_request();
  // A forward step ended: committed when `error` is null; `tokens` sampled.
  void end_step(const Error* error, int tokens);
  void begin_heal();
  void end_heal(const Result<HealReport>& report, double seconds);
  // The session was reset: a reset heals a poisoned one where it succeeds;
  // one that failed leaves the session as unusable as a poisoned one.
  void reset(const Status& done);
  void set_ranks(std::vector<RankFigures> ranks);

  SlotFigures figures() const;

 private:
  void set_state(RankState state);

  const int slot_;
  const std::function<void()> changed_;
  const std::function<void(const HealRecord&)> healed_;
  mutable std::mutex mutex_;
  SlotFigures figures_;           // guarded by mutex_
  bool in_request_ = false;       // guarded by mutex_
  std::optional<Poison> poison_;  // guarded by mutex_: the last, while poisoned or healing
};

}  // namespace accord::serve
