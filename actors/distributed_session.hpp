// A session whose model is split over several ranks, each rank a group of
// CAF actors, driven by a coordinator through the phase protocol. Every
// operation is one transaction: the call blocks once, until the coordinator
// answers, and an aborted step leaves every rank as it was.
//
// This header includes no CAF, so applications can hold a session without
// CAF's headers; the actors live in actors/*.cpp. The session either owns
// an actor system of its own or runs inside the caller's (embedding).
//
// Threading: one call at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/model/model.hpp"

namespace caf {
class actor_system;
class actor_system_config;
}  // namespace caf

namespace accord {

struct DistributedOptions {
  int ranks = 1;
  std::vector<int> unit_counts;  // units per rank; empty: balanced
  int threads_per_rank = 1;
  int phase_timeout_ms = 5000;  // a rank that does not report within it aborts the step
};

struct DistributedStep {
  std::uint64_t epoch = 0;
  int rows = 0;
  std::vector<float> logits;  // (rows, vocab)
};

struct DistributedCheckpoint {
  std::uint64_t session_id = 0;
  std::int32_t position = 0;
  std::uint64_t state_epoch = 0;
  std::uint64_t reset_count = 0;
  std::vector<std::string> rank_digests;
};

class DistributedSession {
 public:
  // With an actor system of its own.
  static Result<std::unique_ptr<DistributedSession>> create(const Model& model, const DistributedOptions& options);
  // Inside the caller's actor system, whose config must have had
  // register_distributed_session_types() applied.
  static Result<std::unique_ptr<DistributedSession>> create(caf::actor_system& system, const Model& model,
                                                            const DistributedOptions& options);
  ~DistributedSession();

  Result<DistributedStep> forward(std::span<const int> tokens);  // logits of every row
  Result<DistributedStep> prefill(std::span<const int> tokens);  // logits of the last row
  Result<DistributedStep> decode(int token);

  Result<DistributedCheckpoint> checkpoint_distributed();
  Status rollback_distributed(const DistributedCheckpoint& checkpoint);
  Status reset_distributed();

  // Stops rank `rank`'s actors as if the rank had failed (fault scenarios):
  // the coordinator sees it go down and poisons the session.
  Status stop_rank(int rank);

  int ranks() const;
  int position() const;  // the committed position
  // Phase rounds run by all transactions so far.
  std::uint64_t phases_run() const;

  struct Impl;

 private:
  explicit DistributedSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Adds the message types of the protocol and of the session API to a
// config, as every node of a cluster must.
void register_distributed_session_types(caf::actor_system_config& config);

}  // namespace accord
