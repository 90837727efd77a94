#include "runtime/net/node_gate.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <vector>

namespace accord {

namespace {

using Clock = std::chrono::steady_clock;

// Sends all of `bytes` now or not at all: a handshake's messages are a few
// dozen bytes, which a fresh socket's buffer always takes.
bool send_now(int fd, const std::string& bytes) {
  const ssize_t sent = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  return sent == static_cast<ssize_t>(bytes.size());
}

UniqueFd open_spare() { return UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC)); }

}  // namespace

ConnectionSlot::ConnectionSlot(std::shared_ptr<std::atomic<int>> count) : count_(std::move(count)) { ++*count_; }

// The slot given up is counted off, as by the destructor (a vector's erase
// moves later slots onto it).
ConnectionSlot& ConnectionSlot::operator=(ConnectionSlot&& other) noexcept {
  if (this != &other) {
    if (count_) --*count_;
    count_ = std::move(other.count_);
  }
  return *this;
}

ConnectionSlot::~ConnectionSlot() {
  if (count_) --*count_;
}

struct NodeGate::Pending {
  UniqueFd fd;
  std::string peer;  // HOST:PORT, for reports
  std::string host;  // what the per-address limit counts by
  NodeHandshake handshake;
  std::string received;
  Clock::time_point deadline;
  ConnectionSlot slot;
};

NodeGate::NodeGate(UniqueFd listener, GateOptions options, Admit admit, Report report)
    : listener_(std::move(listener)),
      options_(std::move(options)),
      admit_(std::move(admit)),
      report_(std::move(report)),
      spare_(open_spare()) {
  int ends[2] = {-1, -1};
  if (::pipe2(ends, O_CLOEXEC) == 0) {
    stop_read_ = UniqueFd(ends[0]);
    stop_write_ = UniqueFd(ends[1]);
  }
  thread_ = std::thread([this] { run(); });
}

NodeGate::~NodeGate() {
  const char stop = 1;
  if (::write(stop_write_.get(), &stop, 1) != 1) listener_ = UniqueFd();
  thread_.join();
}

std::uint16_t NodeGate::port() const { return local_port(listener_.get()); }

void NodeGate::run() {
  std::vector<Pending> pending;
  for (;;) {
    std::vector<pollfd> watched{{stop_read_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
    auto next_deadline = Clock::time_point::max();
    for (const Pending& peer : pending) {
      watched.push_back({peer.fd.get(), POLLIN, 0});
      next_deadline = std::min(next_deadline, peer.deadline);
    }
    int timeout = -1;
    if (!pending.empty()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(next_deadline - Clock::now()).count();
      timeout = static_cast<int>(std::max<long long>(left, 0));
    }
    if (::poll(watched.data(), watched.size(), timeout) < 0 && errno != EINTR) return;
    if (watched[0].revents != 0 || !listener_) return;
    const auto now = Clock::now();
    // Backwards, so that erasing keeps the earlier indices.
    for (std::size_t i = pending.size(); i-- > 0;) {
      const bool ready = watched[i + 2].revents != 0;
      if (ready && advance(pending[i])) continue;
      if (!ready && now < pending[i].deadline) continue;
      if (!ready) report_(pending[i].peer + ": the handshake timed out");
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (watched[1].revents != 0) accept_all(pending);
  }
}

// Reads what `peer` sent and answers. False once it is done with: admitted
// and handed on, or refused.
bool NodeGate::advance(Pending& peer) {
  char buffer[kHelloBytes];
  const std::size_t wanted = kHelloBytes - peer.received.size();
  const ssize_t got = ::recv(peer.fd.get(), buffer, wanted, MSG_DONTWAIT);
  if (got < 0 && (errno == EAGAIN || errno == EINTR)) return true;
  if (got <= 0) {
    report_(peer.peer + ": closed the connection during the handshake");
    return false;
  }
  peer.received.append(buffer, static_cast<std::size_t>(got));
  if (peer.received.size() < kHelloBytes) return true;
  const bool answered = send_now(peer.fd.get(), peer.handshake.take(peer.received));
  if (peer.handshake.verdict() != Verdict::admitted) {
    report_(peer.peer + ": refused, " + describe(peer.handshake.verdict()));
  } else if (answered) {
    admit_(std::move(peer.fd), std::move(peer.slot));
  }
  return false;
}

void NodeGate::accept_all(std::vector<Pending>& pending) {
  for (;;) {
    sockaddr_storage address{};
    socklen_t length = sizeof address;
    UniqueFd fd(
        ::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&address), &length, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd) {
      if (errno != EMFILE && errno != ENFILE) return;
      // Out of descriptors, the peer would stay in the queue and the
      // listener readable: poll would spin. The spare makes room to take
      // the peer and close it.
      spare_ = UniqueFd();
      UniqueFd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      spare_ = open_spare();
      report_("a peer: refused, the node is out of file descriptors");
      return;
    }
    const std::string peer = describe(address);
    if (const Verdict verdict = admission(address, pending); verdict != Verdict::admitted) {
      turn_away(std::move(fd), verdict, peer);
      continue;
    }
    NodeHandshake handshake(options_.secret);
    if (!send_now(fd.get(), handshake.greeting())) continue;
    pending.push_back(Pending{std::move(fd),
                              peer,
                              host_of(address),
                              std::move(handshake),
                              {},
                              Clock::now() + options_.handshake_timeout,
                              ConnectionSlot(open_)});
  }
}

// Whether a peer at `address` may start a handshake now (admitted), or why
// not. At the limit it makes room by closing the oldest handshake.
Verdict NodeGate::admission(const sockaddr_storage& address, std::vector<Pending>& pending) {
  if (!options_.secret && !is_loopback(address)) return Verdict::loopback_only;
  const std::string host = host_of(address);
  const auto from_host =
      std::count_if(pending.begin(), pending.end(), [&](const Pending& peer) { return peer.host == host; });
  if (from_host >= options_.max_handshakes_per_address) return Verdict::address_busy;
  if (open_->load() >= options_.max_connections && !make_room(pending)) return Verdict::busy;
  return Verdict::admitted;
}

// Closes the oldest handshake in progress, the one least likely to be a
// coordinator's (which takes a round trip); false when there is none, every
// slot being an admitted connection's.
bool NodeGate::make_room(std::vector<Pending>& pending) {
  if (pending.empty()) return false;
  report_(pending.front().peer + ": closed, its handshake gave way to a newer peer at the connection limit");
  pending.erase(pending.begin());
  return true;
}

void NodeGate::turn_away(UniqueFd fd, Verdict verdict, const std::string& peer) {
  send_now(fd.get(), NodeHandshake::refusal(verdict));
  report_(peer + ": refused, " + describe(verdict));
}

}  // namespace accord
