// Healing a poisoned distributed session (docs/healing.md): every lost rank
// started afresh where its placement puts it, every rank reset, and the
// committed tokens loaded again from the session's prompt cache or
// prefilled again.
#include <caf/all.hpp>
#include <span>

#include "actors/atoms.hpp"
#include "actors/distributed_session.hpp"
#include "actors/distributed_session_impl.hpp"
#include "messages/session_api.hpp"

namespace accord {

Result<HealReport> DistributedSession::heal() {
  // A checkpoint is the cheapest transaction that tells a usable session
  // from a poisoned one.
  auto probe = checkpoint();
  if (probe) return HealReport{};
  if (probe.error().code() != ErrorCode::commit_indeterminate) return probe.error();
  const std::vector<int> committed = impl_->tokens;
  const auto prompt = committed_prompt_input_identity();
  auto replaced = impl_->restart_exited_ranks();
  if (!replaced) return replaced.error();
  if (Status ok = impl_->reset(); !ok) return ok.error();
  auto cached = impl_->rebuild(committed);
  if (!cached) return cached.error();
  impl_->prepared.restore(prompt);
  return HealReport{true, *replaced, static_cast<int>(committed.size()) - *cached, *cached};
}

Status DistributedSession::reset() {
  if (auto restarted = impl_->restart_exited_ranks(); !restarted) return restarted.error();
  return impl_->reset();
}

// Starts afresh, with an empty state, every rank whose actors exited (or
// whose node went away), and tells the coordinator and the other ranks.
// The reset that follows brings them in. Their fault plan does not come
// back: it fired.
// How many it started.
Result<int> DistributedSession::Impl::restart_exited_ranks() {
  const std::vector<bool> exited = placement->exited_ranks(*this);
  int restarted = 0;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    if (!exited[r]) continue;
    placement->await_exit(*this, static_cast<int>(r));
    const RankOptions fresh{{}, layout->options.phase_timeout, std::nullopt, layout->options.stage};
    if (Status ok = placement->start_rank(*this, static_cast<int>(r), fresh); !ok) {
      return std::move(Error(ok.error()).mark_before_state_mutation());
    }
    (*caller)->send(coordinator, restart_atom::value, static_cast<RankId>(r), ranks[r]);
    ++restarted;
  }
  if (restarted > 0) {
    for (const auto& rank : ranks) (*caller)->send(rank, RankTopology{ranks});
  }
  return restarted;
}

// Every rank back to an empty state.
Status DistributedSession::Impl::reset() {
  const TransactionRequest request{ResetRequest{}};
  auto reply = call(request);
  if (!reply) return reply.error();
  tokens.clear();
  prepared.clear();
  return {};
}

// After a reset: the committed tokens again, from the prompt cache this
// session last saved or loaded where it holds a prefix of them (a rank on
// a spare node has no shard of it; the load then aborts and changes
// nothing), and the rest prefilled. How many came from the cache.
Result<int> DistributedSession::Impl::rebuild(const std::vector<int>& committed) {
  int cached = 0;
  if (cache_mark && cache_mark->prefix.size() <= committed.size() &&
      std::equal(cache_mark->prefix.begin(), cache_mark->prefix.end(), committed.begin())) {
    const CacheMark mark = *cache_mark;
    if (load_cache(mark.root, mark.descriptor, mark.prefix, mark.prepared_input)) {
      cached = static_cast<int>(mark.prefix.size());
    }
  }
  const auto rest = std::span<const int>(committed).subspan(static_cast<std::size_t>(cached));
  if (!rest.empty()) {
    auto replayed = step({.tokens = rest});
    if (!replayed) return replayed.error();
  }
  return cached;
}

}  // namespace accord
