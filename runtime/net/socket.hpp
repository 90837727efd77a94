// TCP sockets for the links between a coordinator and its nodes, opened
// and handshaken here (runtime/net/handshake.hpp) before CAF takes them.
#pragma once

#include <sys/socket.h>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "runtime/base/error.hpp"
#include "runtime/net/handshake.hpp"

namespace accord {

// Owns a file descriptor; closes it unless released.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  int release();
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// A socket listening on `host`:`port` (0: the system picks one), with
// SO_REUSEADDR, so that a restarted node gets its port back while old
// connections linger.
Result<UniqueFd> listen_on(const std::string& host, std::uint16_t port);

// The port a socket is bound to.
std::uint16_t local_port(int fd);

// Whether `address` is on this machine's loopback (127.0.0.0/8, ::1, or
// IPv4 loopback mapped into IPv6).
bool is_loopback(const sockaddr_storage& address);

// "HOST:PORT" of `address`, for logs.
std::string describe(const sockaddr_storage& address);
// "HOST" of `address` (no port): one per machine, as the node gate counts peers.
std::string host_of(const sockaddr_storage& address);

// Connects to `host`:`port` and runs the coordinator's side of the
// handshake, all within `timeout`: the admitted connection, ready for CAF,
// or why there is none ("connection refused", "it refused: ...").
Result<UniqueFd> dial_node(const std::string& host, std::uint16_t port, const std::optional<Secret>& secret,
                           std::chrono::milliseconds timeout);

}  // namespace accord
