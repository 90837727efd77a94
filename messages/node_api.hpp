// What a coordinator tells a node (`accord node`) so that the node becomes
// one rank of its session (docs/protocol.md, "Remote ranks"). It is sent
// with the coordinator's actor; the node answers with its rank's actor,
// or with why it refuses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "messages/fault.hpp"
#include "messages/protocol.hpp"

namespace accord {

struct NodeAssignment {
  SessionId session = 0;
  RankId rank = 0;
  std::vector<std::int32_t> unit_counts;  // the partition: units per rank, rank 0 first
  std::string model_name;                 // the model's file name, which a node with --model-dir loads
  // The model's identity and the digest of each of its tensors in canonical
  // order (runtime/model/identity.hpp): the node checks those of its own
  // shard against them and refuses a model that differs. Empty when the
  // coordinator asks for the shard's digests (shard_atom).
  std::string model_identity;
  std::vector<std::string> tensor_digests;
  std::int32_t threads = 1;              // the rank's compute threads
  std::int32_t phase_timeout_ms = 5000;  // as DistributedOptions::phase_timeout_ms
  std::vector<Fault> faults;             // the session's fault plan; the rank keeps its own entries
  std::uint64_t max_resident_bytes = 0;  // as DistributedOptions's; a node's own --max-resident-bytes wins
  std::string kv_type = "f32";           // the element type of the rank's keys and values (--kv-type)
  std::int32_t context = 0;              // the session's context length (ModelLoad::context): every rank's
  std::int32_t expert_ranks = 1;         // as DistributedOptions::expert_ranks
  // Every rank's node as the coordinator reaches it (HOST:PORT), rank
  // order. The node connects to the nodes of the ranks after its own, so
  // that activations, samples and captures go node to node rather than
  // through the coordinator's process.
  std::vector<std::string> rank_nodes;

  bool operator==(const NodeAssignment&) const = default;
};

// Why a node turned an assignment or a shard request down.
enum class NodeRefusalCode : std::uint8_t {
  none = 0,  // it did as asked
  // Every slot of the node (--slots) runs a rank of a session whose
  // coordinator it still sees alive. A coordinator that just went away is
  // seen gone within the connection timeout, so a new one asks again
  // until then.
  rank_taken = 1,
  faults_not_allowed = 2,  // the assignment carries faults; the node was started without --allow-faults
  invalid_assignment = 3,  // a rank outside the partition, or a fault plan that does not fit it
  model_refused = 4,       // the node cannot read the rank's shard, or its tensors are not the session's
};

struct NodeRefusal {
  NodeRefusalCode code = NodeRefusalCode::none;
  std::string message;  // names the node and says why, for the coordinator's error

  bool refused() const { return code != NodeRefusalCode::none; }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, NodeRefusal& x) {
  return f(x.code, x.message);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, NodeAssignment& x) {
  return f(x.session, x.rank, x.unit_counts, x.model_name, x.model_identity, x.tensor_digests, x.threads,
           x.phase_timeout_ms, x.faults, x.max_resident_bytes, x.kv_type, x.context, x.expert_ranks, x.rank_nodes);
}

}  // namespace accord
