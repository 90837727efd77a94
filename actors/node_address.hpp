// Where a node of a remote cluster listens: `accord node --listen HOST:PORT`
// and `accord generate --peers HOST:PORT,...`. No CAF inside.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.hpp"

namespace accord {

struct NodeAddress {
  std::string host;
  std::uint16_t port = 0;

  std::string to_string() const { return host + ":" + std::to_string(port); }
  bool operator==(const NodeAddress&) const = default;
};

// "HOST:PORT", PORT in 0..65535 when `allow_any_port` (0: the system picks
// one, for a listening node), else 1..65535. HOST is a name or an IPv4
// address. A bad value is a contract error quoting it.
Result<NodeAddress> parse_node_address(std::string_view text, bool allow_any_port = false);

// "HOST:PORT,HOST:PORT,...": the nodes of a session, rank 0 first, each
// named once (check_distinct_nodes).
Result<std::vector<NodeAddress>> parse_peers(std::string_view text);

// Fails with a contract error naming both spellings when two addresses are
// the same node: equal up to the case of the host, with "localhost" taken
// as 127.0.0.1. A node serves one rank, so the second assignment would
// replace the first and the session would fail later, naming a rank down.
Status check_distinct_nodes(const std::vector<NodeAddress>& nodes);

}  // namespace accord
