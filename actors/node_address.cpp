#include "actors/node_address.hpp"

#include <charconv>

namespace accord {

namespace {

Error bad_address(std::string_view text, const std::string& why) {
  return Error(ErrorCode::contract, "bad node address '" + std::string(text) + "': " + why + " (expected HOST:PORT)");
}

}  // namespace

Result<NodeAddress> parse_node_address(std::string_view text, bool allow_any_port) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return bad_address(text, "no port");
  const std::string_view host = text.substr(0, colon);
  const std::string_view port_text = text.substr(colon + 1);
  if (host.empty()) return bad_address(text, "no host");
  if (host.find_first_of(" ,:/") != std::string_view::npos) return bad_address(text, "the host is not a name or an IPv4 address");
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
    if (comma == std::string_view::npos) return peers;
    text.remove_prefix(comma + 1);
  }
}

}  // namespace accord
