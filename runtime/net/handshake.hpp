// The handshake that opens every connection between a coordinator and a
// node (`accord node`), before CAF's own (docs/protocol.md, "Node
// security"). No CAF inside: these are bytes, and the state machines that
// read and write them.
//
// The node speaks first, so that a peer it turns away at once reads why:
//
//   node -> coordinator   greeting: magic, verdict, node's mode, node nonce
//   coordinator -> node   hello:    magic, coordinator's mode, coordinator
//                                   nonce, coordinator proof
//   node -> coordinator   answer:   verdict, node proof
//
// A proof is HMAC-SHA-256 under the shared secret over a label naming the
// side and both nonces, so neither a recorded handshake nor a proof sent
// back to its maker opens a connection; each side checks the other's. A
// mode is 1 with a secret, 0 without; without one both proofs are zeros
// and the node admits only loopback peers (runtime/net/node_gate.hpp).
// Only a connection admitted by both sides goes on to CAF.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/base/error.hpp"

namespace accord {

// A secret shared by a session's coordinator and nodes: the bytes of a file
// only its owner may read.
class Secret {
 public:
  // At least kMinBytes after a trailing newline is removed. A file that its
  // group or others may read is refused, as ssh refuses such a key.
  static Result<Secret> read(const std::filesystem::path& file);
  static Result<Secret> from_bytes(std::string bytes);

  const std::string& bytes() const { return bytes_; }

  static constexpr std::size_t kMinBytes = 16;

 private:
  explicit Secret(std::string bytes) : bytes_(std::move(bytes)) {}
  std::string bytes_;
};

// The secret in `file`; none when `file` is empty.
Result<std::optional<Secret>> secret_from(const std::string& file);

inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kProofBytes = 32;
inline constexpr std::size_t kMagicBytes = 8;
inline constexpr std::size_t kGreetingBytes = kMagicBytes + 2 + kNonceBytes;
inline constexpr std::size_t kHelloBytes = kMagicBytes + 1 + kNonceBytes + kProofBytes;
inline constexpr std::size_t kAnswerBytes = 1 + kProofBytes;

// What a node answers. Every value but `admitted` closes the connection.
enum class Verdict : std::uint8_t {
  admitted = 0,
  needs_secret = 1,   // the node has a secret, the coordinator none
  has_no_secret = 2,  // the coordinator has a secret, the node none
  wrong_proof = 3,    // the coordinator's proof does not check
  malformed = 4,      // not a hello of this protocol
  loopback_only = 5,  // the node has no secret and the peer is not on loopback
  busy = 6,           // the node is at its connection limit
  address_busy = 7,   // the node has as many handshakes from the peer's address as it takes
};

// Why a node refused, in words, for the coordinator's error.
std::string describe(Verdict verdict);

// The node's side: it sends greeting(), waits for kHelloBytes, and sends
// what take() answers; then it is done.
class NodeHandshake {
 public:
  explicit NodeHandshake(std::optional<Secret> secret);

  std::string greeting() const;
  // The greeting of a peer turned away at once (loopback_only, busy, address_busy).
  static std::string refusal(Verdict verdict);

  std::string take(std::string_view hello);
  bool done() const { return done_; }
  Verdict verdict() const { return verdict_; }

 private:
  Verdict check(std::string_view hello) const;

  std::optional<Secret> secret_;
  std::string node_nonce_;
  bool done_ = false;
  Verdict verdict_ = Verdict::malformed;
};

// The coordinator's side: it reads the greeting, sends the hello
// take_greeting() returns, and checks the node's answer.
class CoordinatorHandshake {
 public:
  explicit CoordinatorHandshake(std::optional<Secret> secret);

  // The hello to send, or why the node refused.
  Result<std::string> take_greeting(std::string_view greeting);
  // Whether the node admitted this coordinator and proved it holds the secret.
  Status take_answer(std::string_view answer) const;

 private:
  std::optional<Secret> secret_;
  std::string coordinator_nonce_;
  std::string node_nonce_;
};

}  // namespace accord
