#include "actors/node_address.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace accord {

namespace {

Error bad_address(std::string_view text, const std::string& why) {
  return Error(ErrorCode::contract, "bad node address '" + std::string(text) + "': " + why + " (expected HOST:PORT)");
}

// The node an address reaches, for comparing: host names are case
// insensitive, and localhost is the loopback address.
NodeAddress canonical(const NodeAddress& address) {
  std::string host = address.host;
  std::transform(host.begin(), host.end(), host.begin(), [](unsigned char c) { return std::tolower(c); });
  if (host == "localhost") host = "127.0.0.1";
  return {host, address.port};
}

}  // namespace

Result<NodeAddress> parse_node_address(std::string_view text, bool allow_any_port) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return bad_address(text, "no port");
  const std::string_view host = text.substr(0, colon);
  const std::string_view port_text = text.substr(colon + 1);
  if (host.empty()) return bad_address(text, "no host");
  if (host.find_first_of(" ,:/") != std::string_view::npos)
    return bad_address(text, "the host is not a name or an IPv4 address");
  unsigned port = 0;
  const auto [end, error] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || error != std::errc() || end != port_text.data() + port_text.size() || port > 65535) {
    return bad_address(text, "the port is not a number from 0 to 65535");
  }
  if (port == 0 && !allow_any_port) return bad_address(text, "port 0 names no node");
  return NodeAddress{std::string(host), static_cast<std::uint16_t>(port)};
}

Result<std::vector<NodeAddress>> parse_peers(std::string_view text) {
  std::vector<NodeAddress> peers;
  while (true) {
    const auto comma = text.find(',');
    auto address = parse_node_address(text.substr(0, comma));
    if (!address) return address.error();
    peers.push_back(std::move(*address));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  if (Status ok = check_distinct_nodes(peers); !ok) return ok.error();
  return peers;
}

Status check_distinct_nodes(const std::vector<NodeAddress>& nodes) {
  for (std::size_t later = 1; later < nodes.size(); ++later) {
    for (std::size_t earlier = 0; earlier < later; ++earlier) {
      if (canonical(nodes[earlier]) != canonical(nodes[later])) continue;
      const std::string spelling = nodes[later] == nodes[earlier] ? "" : " (as " + nodes[later].to_string() + ")";
      return Error(ErrorCode::contract, "the node " + nodes[earlier].to_string() + " is named twice: rank " +
                                            std::to_string(earlier) + " and rank " + std::to_string(later) + spelling +
                                            "; each rank needs a node of its own");
    }
  }
  return {};
}

}  // namespace accord
