// The security of nodes (docs/protocol.md, "Node security"), from the
// bytes up:
// - the handshake (runtime/net/handshake.hpp): the same secret admits both
//   ways; another secret, a recorded hello, a forged node proof, mixed
//   modes and garbage are refused;
// - the gate (runtime/net/node_gate.hpp): it admits only after the
//   handshake, turns away peers when admitted connections fill its limit,
//   gives a newcomer the slot of the oldest handshake, takes at most 4
//   handshakes from one address and closes handshakes that do not finish;
// - `accord node` processes: a secret on both sides, random bytes,
//   truncated and oversized frames, floods of idle connections, and
//   prompt caches confined to the node's folder.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "actors/distributed_session.hpp"
#include "runtime/io/env.hpp"
#include "runtime/net/node_gate.hpp"
#include "tests/node_process.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

using Clock = std::chrono::steady_clock;
using test::NodeProcess;

// Generous: these bound waits for things that happen in milliseconds.
constexpr auto kPatience = std::chrono::seconds(20);

Secret secret(const std::string& text) { return Secret::from_bytes(text).value(); }

// --- the handshake ----------------------------------------------------------

struct Exchange {
  Status coordinator;  // what the coordinator concluded
  Verdict verdict;     // what the node concluded
};

// One handshake between a node holding `node_secret` and a coordinator
// holding `coordinator_secret`.
Exchange shake(std::optional<Secret> node_secret, std::optional<Secret> coordinator_secret) {
  NodeHandshake node(std::move(node_secret));
  CoordinatorHandshake coordinator(std::move(coordinator_secret));
  auto hello = coordinator.take_greeting(node.greeting());
  if (!hello) return {hello.error(), Verdict::malformed};
  const std::string answer = node.take(*hello);
  return {coordinator.take_answer(answer), node.verdict()};
}

TEST(NodeHandshake, TheSameSecretAdmitsBothWays) {
  const auto both = shake(secret("a shared secret of the cluster"), secret("a shared secret of the cluster"));
  EXPECT_TRUE(both.coordinator) << both.coordinator.error().message();
  EXPECT_EQ(both.verdict, Verdict::admitted);
  const auto neither = shake(std::nullopt, std::nullopt);
  EXPECT_TRUE(neither.coordinator);
  EXPECT_EQ(neither.verdict, Verdict::admitted);
}

TEST(NodeHandshake, AnotherSecretIsRefused) {
  const auto other = shake(secret("a shared secret of the cluster"), secret("a guess at the secret!!"));
  EXPECT_EQ(other.verdict, Verdict::wrong_proof);
  ASSERT_FALSE(other.coordinator);
  EXPECT_NE(other.coordinator.error().message().find("secret is not the node's"), std::string::npos);
}

TEST(NodeHandshake, EachSideNamesAMissingSecret) {
  const auto no_coordinator_secret = shake(secret("a shared secret of the cluster"), std::nullopt);
  ASSERT_FALSE(no_coordinator_secret.coordinator);
  EXPECT_NE(no_coordinator_secret.coordinator.error().message().find("requires the cluster's secret"),
            std::string::npos);
  const auto no_node_secret = shake(std::nullopt, secret("a shared secret of the cluster"));
  ASSERT_FALSE(no_node_secret.coordinator);
  EXPECT_NE(no_node_secret.coordinator.error().message().find("the node none"), std::string::npos);
  // A node that is sent the other mode anyway refuses it itself.
  NodeHandshake node(secret("a shared secret of the cluster"));
  CoordinatorHandshake coordinator(std::nullopt);
  NodeHandshake plain(std::nullopt);
  auto hello = coordinator.take_greeting(plain.greeting());
  ASSERT_TRUE(hello);
  node.take(*hello);
  EXPECT_EQ(node.verdict(), Verdict::needs_secret);
}

TEST(NodeHandshake, ARecordedHelloOpensNoOtherConnection) {
  const Secret shared = secret("a shared secret of the cluster");
  NodeHandshake first(shared);
  CoordinatorHandshake coordinator(shared);
  auto hello = coordinator.take_greeting(first.greeting());
  ASSERT_TRUE(hello);
  first.take(*hello);
  EXPECT_EQ(first.verdict(), Verdict::admitted);
  NodeHandshake second(shared);  // a fresh nonce
  second.take(*hello);
  EXPECT_EQ(second.verdict(), Verdict::wrong_proof);
}

TEST(NodeHandshake, ANodeWithoutTheSecretCannotForgeItsProof) {
  const Secret shared = secret("a shared secret of the cluster");
  NodeHandshake impostor(secret("not the cluster's secret"));
  CoordinatorHandshake coordinator(shared);
  auto hello = coordinator.take_greeting(impostor.greeting());
  ASSERT_TRUE(hello);
  std::string admitted_anyway(kAnswerBytes, '\0');  // verdict admitted, a made-up proof
  admitted_anyway[1] = 'x';
  const Status trusted = coordinator.take_answer(admitted_anyway);
  ASSERT_FALSE(trusted);
  EXPECT_NE(trusted.error().message().find("proof does not check"), std::string::npos);
}

TEST(NodeHandshake, GarbageIsRefusedBothWays) {
  std::mt19937 random(7);
  std::string garbage(kHelloBytes, '\0');
  for (char& c : garbage) c = static_cast<char>(random());
  NodeHandshake node(std::nullopt);
  const std::string answer = node.take(garbage);
  EXPECT_EQ(node.verdict(), Verdict::malformed);
  EXPECT_EQ(static_cast<Verdict>(answer[0]), Verdict::malformed);
  CoordinatorHandshake coordinator(std::nullopt);
  EXPECT_FALSE(coordinator.take_greeting(garbage.substr(0, kGreetingBytes)));
  EXPECT_FALSE(coordinator.take_greeting("short"));
  EXPECT_FALSE(CoordinatorHandshake(std::nullopt).take_answer(""));
}

TEST(Secret, AShortSecretOrAFileOthersMayReadIsRefused) {
  EXPECT_FALSE(Secret::from_bytes("too short"));
  EXPECT_EQ(Secret::from_bytes("sixteen bytes ok\n").value().bytes(), "sixteen bytes ok");
  test::TempDir dir;
  const std::string file = dir.file("secret");
  std::ofstream(file) << "a shared secret of the cluster\n";
  std::filesystem::permissions(file, std::filesystem::perms::owner_read | std::filesystem::perms::group_read);
  const auto shared = Secret::read(file);
  ASSERT_FALSE(shared);
  EXPECT_NE(shared.error().message().find("chmod 600"), std::string::npos) << shared.error().message();
  std::filesystem::permissions(file, std::filesystem::perms::owner_read);
  ASSERT_TRUE(Secret::read(file));
  EXPECT_EQ(Secret::read(file)->bytes(), "a shared secret of the cluster");
  EXPECT_FALSE(Secret::read(dir.file("missing")));
}

TEST(PlainNames, OnlyAnEntryOfTheFolderIsNamed) {
  EXPECT_EQ(entry_in("/models", "stories.bin", "the model").value(), "/models/stories.bin");
  const std::vector<std::string> bad_names = {"", ".", "..", "../etc/shadow", "/etc/shadow", "a/b", {"a\0b", 3}};
  for (const std::string& bad : bad_names) {
    const auto named = entry_in("/models", bad, "the model");
    ASSERT_FALSE(named) << bad;
    EXPECT_EQ(named.error().code(), ErrorCode::contract);
    EXPECT_NE(named.error().message().find("the model must be a plain name"), std::string::npos);
  }
}

sockaddr_storage ipv4(std::uint32_t host_order) {
  sockaddr_storage address{};
  auto& v4 = reinterpret_cast<sockaddr_in&>(address);
  v4.sin_family = AF_INET;
  v4.sin_addr.s_addr = htonl(host_order);
  return address;
}

sockaddr_storage ipv6(std::initializer_list<unsigned char> tail, bool mapped) {
  sockaddr_storage address{};
  auto& v6 = reinterpret_cast<sockaddr_in6&>(address);
  v6.sin6_family = AF_INET6;
  if (mapped) v6.sin6_addr.s6_addr[10] = v6.sin6_addr.s6_addr[11] = 0xff;
  std::copy(tail.begin(), tail.end(), v6.sin6_addr.s6_addr + 16 - tail.size());
  return address;
}

TEST(PlainNames, LoopbackIsTheLoopbackNetworkOnly) {
  EXPECT_TRUE(is_loopback(ipv4(0x7f000001)));
  EXPECT_TRUE(is_loopback(ipv4(0x7f050505)));
  EXPECT_FALSE(is_loopback(ipv4(0x0a000001)));
  EXPECT_FALSE(is_loopback(ipv4(0)));
  EXPECT_TRUE(is_loopback(ipv6({1}, false)));            // ::1
  EXPECT_TRUE(is_loopback(ipv6({127, 0, 0, 1}, true)));  // ::ffff:127.0.0.1
  EXPECT_FALSE(is_loopback(ipv6({10, 0, 0, 1}, true)));  // ::ffff:10.0.0.1
  EXPECT_FALSE(is_loopback(ipv6({0x20, 0x01, 0x0d, 0xb8}, false)));
}

// --- the gate -------------------------------------------------------------

// A bare TCP connection to 127.0.0.1:port from `source`, past no
// handshake. On Linux every address of 127.0.0.0/8 is loopback, so the
// tests play peers of several machines from this one.
UniqueFd raw_connection(std::uint16_t port, const std::string& source = "127.0.0.1") {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in from{};
  from.sin_family = AF_INET;
  EXPECT_EQ(::inet_pton(AF_INET, source.c_str(), &from.sin_addr), 1) << source;
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&from), sizeof from), 0) << source;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(0x7f000001);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  // A node that never answers fails a test that reads, instead of hanging it.
  const timeval patience{20, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof patience);
  return fd;
}

// `count` bytes from `fd`, or fewer if it closes first.
std::string receive(int fd, std::size_t count) {
  std::string bytes(count, '\0');
  std::size_t got = 0;
  while (got < count) {
    const ssize_t n = ::recv(fd, bytes.data() + got, count - got, 0);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  bytes.resize(got);
  return bytes;
}

// Whether the node greeted `fd` as a peer whose handshake it started
// (not one it turned away at once), reading the greeting.
bool greeted(int fd) {
  const std::string greeting = receive(fd, kGreetingBytes);
  return greeting.size() == kGreetingBytes && static_cast<Verdict>(greeting[kMagicBytes]) == Verdict::admitted;
}

// dial_node from `source`: the coordinator's side of the handshake on a
// raw connection to 127.0.0.1:port.
Result<UniqueFd> dial_from(const std::string& source, std::uint16_t port, const std::optional<Secret>& secret) {
  UniqueFd fd = raw_connection(port, source);
  CoordinatorHandshake handshake(secret);
  auto hello = handshake.take_greeting(receive(fd.get(), kGreetingBytes));
  if (!hello) return hello.error();
  ::send(fd.get(), hello->data(), hello->size(), MSG_NOSIGNAL);
  if (Status ok = handshake.take_answer(receive(fd.get(), kAnswerBytes)); !ok) return ok.error();
  return fd;
}

// A gate on 127.0.0.1 that keeps what it admits and what it reports.
class GateTest : public ::testing::Test {
 protected:
  void open(GateOptions options) {
    auto listener = listen_on("127.0.0.1", 0);
    ASSERT_TRUE(listener) << listener.error().message();
    gate_ = std::make_unique<NodeGate>(
        std::move(*listener), std::move(options),
        [this](UniqueFd fd, ConnectionSlot slot) {
          std::lock_guard lock(mutex_);
          admitted_.emplace_back(std::move(fd), std::move(slot));
        },
        [this](const std::string& why) {
          std::lock_guard lock(mutex_);
          reports_ += why + "\n";
        });
  }

  Result<UniqueFd> dial(const std::optional<Secret>& secret) {
    return dial_node("127.0.0.1", gate_->port(), secret, std::chrono::seconds(10));
  }

  UniqueFd idle_connection(const std::string& source = "127.0.0.1") { return raw_connection(gate_->port(), source); }
  Result<UniqueFd> dial_from(const std::string& source, const std::optional<Secret>& secret) {
    return accord::dial_from(source, gate_->port(), secret);
  }

  std::size_t admitted() {
    std::lock_guard lock(mutex_);
    return admitted_.size();
  }
  std::string reports() {
    std::lock_guard lock(mutex_);
    return reports_;
  }
  void drop_admitted() {
    std::lock_guard lock(mutex_);
    admitted_.clear();
  }

  std::mutex mutex_;
  std::vector<std::pair<UniqueFd, ConnectionSlot>> admitted_;
  std::string reports_;
  std::unique_ptr<NodeGate> gate_;  // last: stopped before what it feeds
};

// Whether the peer closed `fd` within kPatience (what it sent before is read
// and dropped).
bool closed_by_peer(int fd) {
  const auto deadline = Clock::now() + kPatience;
  char buffer[256];
  while (Clock::now() < deadline) {
    pollfd entry{fd, POLLIN, 0};
    if (::poll(&entry, 1, 100) <= 0) continue;
    const ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
    if (got <= 0) return true;
  }
  return false;
}

TEST_F(GateTest, AdmitsOnlyAfterTheHandshakeAndCountsTheConnection) {
  const Secret shared = secret("a shared secret of the cluster");
  open(GateOptions{shared, 8});
  auto refused = dial(secret("a guess at the secret!!"));
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("secret is not the node's"), std::string::npos);
  auto fd = dial(shared);
  ASSERT_TRUE(fd) << fd.error().message();
  ASSERT_TRUE(test::eventually([&] { return admitted() == 1; }));
  EXPECT_EQ(gate_->open_connections(), 1);
  drop_admitted();
  EXPECT_EQ(gate_->open_connections(), 0);
  EXPECT_NE(reports().find("refused, the coordinator's secret is not the node's"), std::string::npos) << reports();
}

TEST_F(GateTest, TurnsAwayPeersWhenAdmittedConnectionsFillItsLimit) {
  open(GateOptions{std::nullopt, 2});
  auto first = dial(std::nullopt);
  auto second = dial(std::nullopt);
  ASSERT_TRUE(first && second);
  ASSERT_TRUE(test::eventually([&] { return admitted() == 2; }));
  auto busy = dial(std::nullopt);
  ASSERT_FALSE(busy);
  EXPECT_NE(busy.error().message().find("connection limit"), std::string::npos) << busy.error().message();
  drop_admitted();
  ASSERT_TRUE(test::eventually([&] { return gate_->open_connections() == 0; }));
  auto admitted_now = dial(std::nullopt);
  EXPECT_TRUE(admitted_now) << admitted_now.error().message();
}

// Handshakes that never finish, reopened as they time out, must not keep
// the coordinator out with `busy`.
TEST_F(GateTest, ACoordinatorWithTheSecretGetsInWhileHandshakesHoldEverySlot) {
  const Secret shared = secret("a shared secret of the cluster");
  // Handshakes that would time out only long after the test's patience.
  open(GateOptions{shared, 8, std::chrono::minutes(10)});
  std::vector<UniqueFd> held;
  for (const std::string source : {"127.0.0.2", "127.0.0.3"}) {
    for (int i = 0; i < 4; ++i) held.push_back(idle_connection(source));
  }
  ASSERT_TRUE(test::eventually([&] { return gate_->open_connections() == 8; }));
  auto coordinator = dial(shared);
  ASSERT_TRUE(coordinator) << coordinator.error().message();
  ASSERT_TRUE(test::eventually([&] { return admitted() == 1; }));
  EXPECT_EQ(gate_->open_connections(), 8);
  // The oldest handshake gave up its slot; the others keep theirs.
  EXPECT_TRUE(closed_by_peer(held.front().get()));
  EXPECT_NE(reports().find("gave way to a newer peer at the connection limit"), std::string::npos) << reports();
}

// One address must not be able to hold every slot.
TEST_F(GateTest, AFifthHandshakeFromOneAddressIsRefusedAtOnceWhileOthersAreAdmitted) {
  open(GateOptions{std::nullopt, 64, std::chrono::minutes(10)});
  std::vector<UniqueFd> held;
  for (int i = 0; i < 4; ++i) held.push_back(idle_connection("127.0.0.2"));
  ASSERT_TRUE(test::eventually([&] { return gate_->open_connections() == 4; }));
  auto fifth = dial_from("127.0.0.2", std::nullopt);
  ASSERT_FALSE(fifth);
  EXPECT_NE(fifth.error().message().find("too many handshakes in progress from this address"), std::string::npos)
      << fifth.error().message();
  auto other = dial_from("127.0.0.3", std::nullopt);
  ASSERT_TRUE(other) << other.error().message();
  // Once one of its handshakes ends, the address may start another.
  held.pop_back();
  ASSERT_TRUE(test::eventually([&] { return gate_->open_connections() == 4; }));  // 3 handshakes, 1 admitted
  auto again = dial_from("127.0.0.2", std::nullopt);
  EXPECT_TRUE(again) << again.error().message();
  EXPECT_TRUE(test::eventually([&] { return admitted() == 2; }));  // handed on just after the answer is sent
  // The node's log names the address it refused.
  const std::string reported = reports();
  const auto refusal = reported.find(": refused, the node has too many handshakes in progress from this address");
  ASSERT_NE(refusal, std::string::npos) << reported;
  EXPECT_EQ(reported.rfind("127.0.0.2:", refusal), reported.rfind('\n', refusal) + 1) << reported;
}

TEST_F(GateTest, ClosesAHandshakeThatDoesNotFinish) {
  open(GateOptions{std::nullopt, 8, std::chrono::milliseconds(100)});
  UniqueFd silent = idle_connection();
  EXPECT_TRUE(closed_by_peer(silent.get()));
  ASSERT_TRUE(test::eventually([&] { return gate_->open_connections() == 0; }));
  EXPECT_NE(reports().find("the handshake timed out"), std::string::npos) << reports();
  EXPECT_EQ(admitted(), 0u);
}

// --- `accord node` processes -----------------------------------------------

// The shared secret of a test cluster, in a file only its owner reads.
std::string write_secret(const test::TempDir& dir, const std::string& name, const std::string& text) {
  const std::string file = dir.file(name);
  std::ofstream(file) << text << "\n";
  std::filesystem::permissions(file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  return file;
}

const std::vector<int> kPrompt = {1, 403, 407, 261};

// The node runs a session whose logits equal one in-process rank's.
void expect_serving(const NodeProcess& node, const DistributedOptions& options = {}) {
  const Model model = test::load_stories_model();
  auto remote = DistributedSession::connect({node.address()}, model, options);
  ASSERT_TRUE(remote) << remote.error().message() << "\n" << node.log();
  auto local = DistributedSession::create(model, DistributedOptions{});
  ASSERT_TRUE(local);
  EXPECT_TRUE(test::bit_identical(test::greedy_trace(**remote, kPrompt, 2), test::greedy_trace(**local, kPrompt, 2)));
}

std::vector<std::string> with(std::vector<std::string> options, std::initializer_list<std::string> more) {
  options.insert(options.end(), more);
  return options;
}

TEST(NodeProcessSecurity, TheSecretIsCheckedOnBothSides) {
  test::TempDir dir;
  const std::string shared = write_secret(dir, "shared", "a shared secret of the cluster");
  const std::string other = write_secret(dir, "other", "another secret, not the cluster's");
  NodeProcess node(dir, with(test::test_node_options(), {"--secret-file", shared}));
  ASSERT_NE(node.port(), 0);
  const Model model = test::load_stories_model();
  const auto none = DistributedSession::connect({node.address()}, model, DistributedOptions{});
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message().find("requires the cluster's secret"), std::string::npos) << none.error().message();
  DistributedOptions wrong;
  wrong.secret_file = other;
  const auto guessed = DistributedSession::connect({node.address()}, model, wrong);
  ASSERT_FALSE(guessed);
  EXPECT_NE(guessed.error().message().find("secret is not the node's"), std::string::npos) << guessed.error().message();
  DistributedOptions right;
  right.secret_file = shared;
  expect_serving(node, right);
  EXPECT_NE(node.log().find("refused, the coordinator's secret is not the node's"), std::string::npos) << node.log();
}

// An admitted connection (a node without a secret admits loopback peers)
// that then sends `bytes` and closes.
void send_after_handshake(const NodeProcess& node, const std::string& bytes) {
  auto fd = dial_node("127.0.0.1", node.port(), std::nullopt, std::chrono::seconds(10));
  ASSERT_TRUE(fd) << fd.error().message();
  ::send(fd->get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
}

// A BASP header (CAF 0.17.6, network byte order) of a client handshake
// that announces `payload` bytes.
std::string basp_header(std::uint32_t payload) {
  std::string header(32, '\0');
  header[0] = 1;  // client_handshake
  for (int i = 0; i < 4; ++i) header[4 + i] = static_cast<char>(payload >> (24 - 8 * i));
  return header;
}

long resident_kib(const NodeProcess& node) {
  std::ifstream status("/proc/" + std::to_string(node.pid()) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with("VmRSS:")) return std::stol(line.substr(6));
  }
  return -1;
}

TEST(NodeProcessSecurity, RandomBytesTruncatedAndOversizedFramesLeaveItServing) {
  test::TempDir dir;
  NodeProcess node(dir);
  ASSERT_NE(node.port(), 0);
  std::mt19937 random(16);
  auto random_bytes = [&](std::size_t n) {
    std::string bytes(n, '\0');
    for (char& c : bytes) c = static_cast<char>(random());
    return bytes;
  };
  for (int i = 0; i < 40; ++i) {
    // Before the handshake: the gate reads a hello's worth and refuses it.
    UniqueFd raw = raw_connection(node.port());
    const std::string bytes = random_bytes(1 + random() % 4096);
    ::send(raw.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
    // After it: CAF's BASP gets garbage.
    send_after_handshake(node, random_bytes(1 + random() % 4096));
  }
  send_after_handshake(node, basp_header(64).substr(0, 17));  // a truncated header
  send_after_handshake(node, basp_header(64) + "short");      // a truncated payload
  send_after_handshake(node, basp_header(0xFFFFFFF0u) + random_bytes(1 << 16));
  expect_serving(node);
  EXPECT_TRUE(node.alive());
  EXPECT_LT(resident_kib(node), 512 * 1024) << "the node allocated what a frame header claimed";
  EXPECT_NE(node.log().find("a frame of 4294967280 bytes is over the limit"), std::string::npos) << node.log();
}

// 100 connections to `node` that say nothing, 5 from each of 20 addresses
// of 127.0.0.0/8; each must be closed by the node: at once when its
// address has 4 handshakes in progress, the others when a newer peer takes
// their slot or their handshake times out.
void flood_with_idle_connections(const NodeProcess& node) {
  std::vector<UniqueFd> flood;
  for (int i = 0; i < 100; ++i) flood.push_back(raw_connection(node.port(), "127.0.1." + std::to_string(1 + i / 5)));
  for (const UniqueFd& fd : flood) EXPECT_TRUE(closed_by_peer(fd.get()));
}

TEST(NodeProcessSecurity, AFloodOfIdleConnectionsIsClosedAndTheNodeServesOn) {
  test::TempDir dir;
  NodeProcess node(dir, with(test::test_node_options(), {"--max-connections", "16"}));
  ASSERT_NE(node.port(), 0);
  flood_with_idle_connections(node);
  expect_serving(node);
  EXPECT_NE(node.log().find("the node has too many handshakes in progress from this address"), std::string::npos)
      << node.log();
  EXPECT_NE(node.log().find("gave way to a newer peer at the connection limit"), std::string::npos) << node.log();
  EXPECT_NE(node.log().find("the handshake timed out"), std::string::npos) << node.log();
}

// As an operator would meet it: connections that never prove the secret,
// holding every slot, must not keep the coordinator out ("busy").
TEST(NodeProcessSecurity, TheCoordinatorGetsInWhileIdleConnectionsHoldEverySlot) {
  test::TempDir dir;
  const std::string shared = write_secret(dir, "shared", "a shared secret of the cluster");
  NodeProcess node(dir, with(test::test_node_options(), {"--secret-file", shared, "--max-connections", "8"}));
  ASSERT_NE(node.port(), 0);
  std::vector<UniqueFd> held;
  for (int i = 0; i < 8; ++i) {
    held.push_back(raw_connection(node.port(), i < 4 ? "127.0.0.2" : "127.0.0.3"));
    ASSERT_TRUE(greeted(held.back().get())) << "connection " << i << " was not let in:\n" << node.log();
  }
  DistributedOptions right;
  right.secret_file = shared;
  expect_serving(node, right);
}

// Out of descriptors, a node left the flood in its listen queue, which
// stayed readable: it spun and refused coordinators.
TEST(NodeProcessSecurity, ANodeOutOfDescriptorsClosesTheFloodAndServesOn) {
  test::TempDir dir;
  NodeProcess node(dir, with(test::test_node_options(), {"--max-connections", "1000"}), 0, 64);
  ASSERT_NE(node.port(), 0);
  flood_with_idle_connections(node);
  expect_serving(node);
  EXPECT_NE(node.log().find("the node is out of file descriptors"), std::string::npos) << node.log();
}

TEST(NodeProcessSecurity, PromptCachesAreNamesInTheNodesFolder) {
  test::TempDir dir;
  test::TempDir caches;
  NodeProcess without(dir);
  NodeProcess with_folder(dir, with(test::test_node_options(), {"--prompt-cache-dir", caches.path().string()}));
  ASSERT_NE(without.port(), 0);
  ASSERT_NE(with_folder.port(), 0);
  const Model model = test::load_stories_model();
  const std::vector<int> prefix(kPrompt.begin(), kPrompt.end() - 1);
  auto none = DistributedSession::connect({without.address()}, model, DistributedOptions{});
  ASSERT_TRUE(none) << none.error().message();
  ASSERT_TRUE((*none)->prefill(prefix));
  const auto refused = (*none)->save_prompt_cache("cache", test::kCacheDescriptor, prefix);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("keeps no prompt cache"), std::string::npos) << refused.error().message();

  auto session = DistributedSession::connect({with_folder.address()}, model, DistributedOptions{});
  ASSERT_TRUE(session) << session.error().message();
  ASSERT_TRUE((*session)->prefill(prefix));
  const std::string outside = dir.file("outside");
  const auto path = (*session)->save_prompt_cache(outside, test::kCacheDescriptor, prefix);
  ASSERT_FALSE(path);
  EXPECT_NE(path.error().message().find("must be a plain name"), std::string::npos) << path.error().message();
  EXPECT_FALSE(std::filesystem::exists(outside));
  const auto saved = (*session)->save_prompt_cache("cache", test::kCacheDescriptor, prefix);
  ASSERT_TRUE(saved) << saved.error().message();
  EXPECT_TRUE(std::filesystem::is_directory(caches.path() / "cache"));
}

TEST(NodeProcessSecurity, ANodeNeedsItsOwnModelAndSaysWhoMayConnect) {
  test::TempDir dir;
  const auto no_model = test::run_accord({"node", "--listen", "127.0.0.1:0"});
  EXPECT_EQ(no_model.exit_code, 1) << no_model.output;
  EXPECT_NE(no_model.output.find("a node needs --model FILE or --model-dir FOLDER"), std::string::npos)
      << no_model.output;
  const auto bad_folder = test::run_accord({"node", "--listen", "127.0.0.1:0", "--model-dir", dir.file("none")});
  EXPECT_EQ(bad_folder.exit_code, 1) << bad_folder.output;
  EXPECT_NE(bad_folder.output.find("is not a folder"), std::string::npos) << bad_folder.output;
  NodeProcess node(dir);
  ASSERT_NE(node.port(), 0);
  EXPECT_NE(node.log().find("only peers on this machine (loopback) are admitted"), std::string::npos) << node.log();
}

}  // namespace
}  // namespace accord
