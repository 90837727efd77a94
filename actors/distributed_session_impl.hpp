// The inside of a DistributedSession, shared by actors/distributed_session.cpp
// (creation, steps, calls, chains, reads), actors/healing.cpp and the CAF
// entry points of actors/caf_session.hpp. Internal to actors/: includes CAF.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/distributed_session.hpp"
#include "actors/rank_placement.hpp"
#include "messages/session_api.hpp"
#include "runtime/rank/prompt_input.hpp"
#include "runtime/rank/transaction_record.hpp"

namespace accord {

struct DistributedSession::Impl : SessionActors {
  explicit Impl(std::unique_ptr<RankPlacement> where);
  // Stops every actor and waits for the local ones.
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // Spawns the coordinator and starts every rank where the placement puts
  // it.
  Status start(const Model& m, const DistributedOptions& options);
  Result<Partition> partition_for(const DistributedOptions& options) const;
  Result<RankOptions> rank_options_for(const Partition& partition, const DistributedOptions& options) const;

  // One transaction; a chained step the coordinator began after it is
  // remembered.
  Result<TransactionReply> call(const TransactionRequest& request);
  // Undoes a chained step the caller will not take, before anything that
  // reaches the ranks other than through a transaction, or reads their state.
  void end_chain();
  int position() const { return static_cast<int>(tokens.size()); }
  Result<DistributedStep> step(const StepOptions& options);
  Result<PromptCacheSaveResult> save_cache(const std::filesystem::path& root, const PromptCacheDescriptor& descriptor,
                                           std::span<const int> prefix, const std::string& prepared_input);
  Status load_cache(const std::filesystem::path& root, const PromptCacheDescriptor& expected,
                    std::span<const int> prefix, const std::string& prepared_input);

  // Healing (actors/healing.cpp).
  Result<int> restart_exited_ranks();
  Status reset();
  Result<int> rebuild(const std::vector<int>& committed);

  std::unique_ptr<RankPlacement> placement;
  DistributedOptions started_with;  // what start() was given: fork() starts its session so
  // The prompt cache last saved or loaded, which heal() loads again.
  struct CacheMark {
    std::filesystem::path root;
    PromptCacheDescriptor descriptor;
    std::vector<int> prefix;
    std::string prepared_input;
  };
  std::optional<CacheMark> cache_mark;
  // The committed tokens of every rank, and the prepared input behind them:
  // the handle keeps them so it can describe the committed prompt.
  std::vector<int> tokens;
  PreparedInputRecord prepared;
  DistributedStats stats;
  TransactionRecord record;
  // The step the coordinator began on its own after the last commit (a
  // chained step), and when that commit's reply came.
  std::optional<TransactionRequest> chained;
  std::chrono::steady_clock::time_point chained_since;
};

// What the files above reach of a session that its public header keeps
// private.
struct DistributedSessionAccess {
  using Impl = DistributedSession::Impl;
  static const Impl& impl(const DistributedSession& session) { return *session.impl_; }
  static std::unique_ptr<DistributedSession> wrap(std::unique_ptr<Impl> impl) {
    return std::unique_ptr<DistributedSession>(new DistributedSession(std::move(impl)));
  }
};

}  // namespace accord
