#include "runtime/net/socket.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <memory>

namespace accord {

namespace {

using Clock = std::chrono::steady_clock;

std::string system_error(int error) { return std::strerror(error); }

int milliseconds_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Whether `fd` became ready for `events` before `deadline`.
bool wait_until(int fd, short events, Clock::time_point deadline) {
  pollfd entry{fd, events, 0};
  for (;;) {
    const int ready = ::poll(&entry, 1, milliseconds_until(deadline));
    if (ready > 0) return true;
    if (ready == 0 || errno != EINTR) return false;
  }
}

using AddressList = std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>;

Result<AddressList> resolve(const std::string& host, std::uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* list = nullptr;
  const int failed = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list);
  if (failed != 0) return Error(ErrorCode::io, "cannot resolve " + printable(host) + ": " + gai_strerror(failed));
  return AddressList(list, &freeaddrinfo);
}

UniqueFd stream_socket(const addrinfo& address) {
  return UniqueFd(::socket(address.ai_family, address.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
}

// A connected non-blocking socket to one of `host`'s addresses.
Result<UniqueFd> connect_until(const std::string& host, std::uint16_t port, Clock::time_point deadline) {
  auto addresses = resolve(host, port, false);
  if (!addresses) return addresses.error();
  int error = ETIMEDOUT;
  for (const addrinfo* a = addresses->get(); a != nullptr; a = a->ai_next) {
    UniqueFd fd = stream_socket(*a);
    if (!fd) {
      error = errno;
      continue;
    }
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      error = errno;
      continue;
    }
    if (!wait_until(fd.get(), POLLOUT, deadline)) {
      error = ETIMEDOUT;
      continue;
    }
    socklen_t length = sizeof error;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0) return fd;
  }
  return Error(ErrorCode::io, system_error(error));
}

Status send_all(int fd, std::string_view bytes, Clock::time_point deadline) {
  while (!bytes.empty()) {
    const ssize_t sent = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (sent > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(sent));
    } else if (errno == EAGAIN || errno == EINTR) {
      if (!wait_until(fd, POLLOUT, deadline)) return Error(ErrorCode::io, "the handshake timed out");
    } else {
      return Error(ErrorCode::io, "it closed the connection during the handshake");
    }
  }
  return {};
}

// `count` bytes, or fewer if the peer closed the connection first.
Result<std::string> receive_exactly(int fd, std::size_t count, Clock::time_point deadline) {
  std::string bytes(count, '\0');
  std::size_t have = 0;
  while (have < count) {
    const ssize_t got = ::recv(fd, bytes.data() + have, count - have, 0);
    if (got > 0) {
      have += static_cast<std::size_t>(got);
    } else if (got == 0) {
      break;
    } else if (errno == EAGAIN || errno == EINTR) {
      if (!wait_until(fd, POLLIN, deadline)) return Error(ErrorCode::io, "the handshake timed out");
    } else {
      break;
    }
  }
  bytes.resize(have);
  return bytes;
}

Status run_handshake(int fd, const std::optional<Secret>& secret, Clock::time_point deadline) {
  CoordinatorHandshake handshake(secret);
  auto greeting = receive_exactly(fd, kGreetingBytes, deadline);
  if (!greeting) return greeting.error();
  if (greeting->empty()) return Error(ErrorCode::io, "it closed the connection during the handshake");
  auto hello = handshake.take_greeting(*greeting);
  if (!hello) return hello.error();
  if (Status sent = send_all(fd, *hello, deadline); !sent) return sent;
  auto answer = receive_exactly(fd, kAnswerBytes, deadline);
  if (!answer) return answer.error();
  return handshake.take_answer(*answer);
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

int UniqueFd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

Result<UniqueFd> listen_on(const std::string& host, std::uint16_t port) {
  auto addresses = resolve(host, port, true);
  if (!addresses) return addresses.error();
  const addrinfo& a = *addresses->get();
  UniqueFd fd = stream_socket(a);
  const int on = 1;
  if (!fd || ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
      ::bind(fd.get(), a.ai_addr, a.ai_addrlen) != 0 || ::listen(fd.get(), SOMAXCONN) != 0) {
    return Error(ErrorCode::io, system_error(errno));
  }
  return fd;
}

std::uint16_t local_port(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return 0;
  if (address.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
  if (address.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
  return 0;
}

bool is_loopback(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in&>(address).sin_addr.s_addr) >> 24) == 127;
  }
  if (address.ss_family != AF_INET6) return false;
  const in6_addr& v6 = reinterpret_cast<const sockaddr_in6&>(address).sin6_addr;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

std::string host_of(const sockaddr_storage& address) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (address.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(address).sin_addr, host, sizeof host);
  } else if (address.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(address).sin6_addr, host, sizeof host);
  }
  return host;
}

std::string describe(const sockaddr_storage& address) {
  std::uint16_t port = 0;
  if (address.ss_family == AF_INET) port = ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
  if (address.ss_family == AF_INET6) port = ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
  return host_of(address) + ":" + std::to_string(port);
}

Result<UniqueFd> dial_node(const std::string& host, std::uint16_t port, const std::optional<Secret>& secret,
                           std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto fd = connect_until(host, port, deadline);
  if (!fd) return fd.error();
  if (Status ok = run_handshake(fd->get(), secret, deadline); !ok) return ok.error();
  return fd;
}

}  // namespace accord
