#include "runtime/net/handshake.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <cstdlib>

#include "runtime/io/durable_file.hpp"

namespace accord {

namespace {

constexpr std::string_view kMagic{"accord\x01\x00", kMagicBytes};
constexpr std::string_view kNodeLabel = "accord node proof";
constexpr std::string_view kCoordinatorLabel = "accord coordinator proof";
// A secret is a key, not a document.
constexpr std::size_t kMaxFileBytes = 4096;

std::string fresh_nonce() {
  std::string nonce(kNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(nonce.size())) != 1) {
    // OpenSSL's generator failing is not something a connection can recover
    // from, and a predictable nonce would make the handshake replayable.
    std::abort();
  }
  return nonce;
}

// HMAC-SHA-256 under the secret over `label`, then the nonces `first` and
// `second`; zeros without a secret.
std::string proof(const std::optional<Secret>& secret, std::string_view label, std::string_view first,
                  std::string_view second) {
  std::string mac(kProofBytes, '\0');
  if (!secret) return mac;
  const std::string data = std::string(label) + '\0' + std::string(first) + std::string(second);
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret->bytes().data(), static_cast<int>(secret->bytes().size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), reinterpret_cast<unsigned char*>(mac.data()),
       &length);
  return mac;
}

bool same(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

char mode(const std::optional<Secret>& secret) { return secret ? 1 : 0; }

}  // namespace

Result<Secret> Secret::read(const std::filesystem::path& file) {
  struct stat info {};
  if (::stat(file.c_str(), &info) != 0) {
    return Error(ErrorCode::contract, "cannot read the secret file " + printable(file.string()));
  }
  if ((info.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return Error(ErrorCode::contract, "the secret file " + printable(file.string()) +
                                          " may be read by others; make it the owner's alone (chmod 600)");
  }
  auto bytes = read_file(file, kMaxFileBytes);
  if (!bytes) return Error(ErrorCode::contract, "cannot read the secret file " + printable(file.string()));
  auto secret = from_bytes(std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size()));
  if (!secret)
    return Error(ErrorCode::contract, "the secret file " + printable(file.string()) + ": " + secret.error().message());
  return secret;
}

Result<Secret> Secret::from_bytes(std::string bytes) {
  if (bytes.ends_with('\n')) bytes.pop_back();
  if (bytes.ends_with('\r')) bytes.pop_back();
  if (bytes.size() < kMinBytes) {
    return Error(ErrorCode::contract, "a secret needs at least " + std::to_string(kMinBytes) + " bytes, this has " +
                                          std::to_string(bytes.size()));
  }
  return Secret(std::move(bytes));
}

Result<std::optional<Secret>> secret_from(const std::string& file) {
  if (file.empty()) return std::optional<Secret>();
  auto secret = Secret::read(file);
  if (!secret) return secret.error();
  return std::optional<Secret>(std::move(*secret));
}

std::string describe(Verdict verdict) {
  switch (verdict) {
    case Verdict::admitted: return "admitted";
    case Verdict::needs_secret:
      return "the node requires the cluster's secret (--secret-file or ACCORD_SECRET_FILE) and the coordinator "
             "has none";
    case Verdict::has_no_secret:
      return "the coordinator has a secret and the node none (start the node with the same --secret-file)";
    case Verdict::wrong_proof: return "the coordinator's secret is not the node's";
    case Verdict::malformed: return "the peer does not speak accord's node handshake";
    case Verdict::loopback_only:
      return "the node has no secret, so it admits only peers on its own machine (give both sides --secret-file)";
    case Verdict::busy: return "the node is at its connection limit";
    case Verdict::address_busy: return "the node has too many handshakes in progress from this address";
  }
  return "verdict " + std::to_string(static_cast<int>(verdict));
}

// --- the node's side ----------------------------------------------------------

NodeHandshake::NodeHandshake(std::optional<Secret> secret) : secret_(std::move(secret)), node_nonce_(fresh_nonce()) {}

std::string NodeHandshake::greeting() const {
  std::string bytes(kMagic);
  bytes += static_cast<char>(Verdict::admitted);
  bytes += mode(secret_);
  bytes += node_nonce_;
  return bytes;
}

std::string NodeHandshake::refusal(Verdict verdict) {
  std::string bytes(kMagic);
  bytes += static_cast<char>(verdict);
  bytes.resize(kGreetingBytes, '\0');
  return bytes;
}

std::string NodeHandshake::take(std::string_view hello) {
  done_ = true;
  verdict_ = check(hello);
  std::string answer(1, static_cast<char>(verdict_));
  if (verdict_ == Verdict::admitted) {
    const std::string_view coordinator_nonce = hello.substr(kMagicBytes + 1, kNonceBytes);
    answer += proof(secret_, kNodeLabel, coordinator_nonce, node_nonce_);
  }
  answer.resize(kAnswerBytes, '\0');
  return answer;
}

Verdict NodeHandshake::check(std::string_view hello) const {
  if (hello.size() != kHelloBytes || hello.substr(0, kMagicBytes) != kMagic) return Verdict::malformed;
  const char coordinator_mode = hello[kMagicBytes];
  if (coordinator_mode != 0 && coordinator_mode != 1) return Verdict::malformed;
  if (coordinator_mode == 1 && !secret_) return Verdict::has_no_secret;
  if (coordinator_mode == 0 && secret_) return Verdict::needs_secret;
  const std::string_view coordinator_nonce = hello.substr(kMagicBytes + 1, kNonceBytes);
  const std::string_view coordinator_proof = hello.substr(kMagicBytes + 1 + kNonceBytes, kProofBytes);
  if (!same(coordinator_proof, proof(secret_, kCoordinatorLabel, node_nonce_, coordinator_nonce))) {
    return Verdict::wrong_proof;
  }
  return Verdict::admitted;
}

// --- the coordinator's side ---------------------------------------------------

CoordinatorHandshake::CoordinatorHandshake(std::optional<Secret> secret)
    : secret_(std::move(secret)), coordinator_nonce_(fresh_nonce()) {}

Result<std::string> CoordinatorHandshake::take_greeting(std::string_view greeting) {
  if (greeting.size() != kGreetingBytes || greeting.substr(0, kMagicBytes) != kMagic) {
    return Error(ErrorCode::io, "it does not speak accord's node handshake");
  }
  const auto verdict = static_cast<Verdict>(greeting[kMagicBytes]);
  if (verdict != Verdict::admitted) return Error(ErrorCode::io, "it refused: " + describe(verdict));
  const char node_mode = greeting[kMagicBytes + 1];
  if (node_mode == 1 && !secret_) return Error(ErrorCode::io, "it refused: " + describe(Verdict::needs_secret));
  if (node_mode == 0 && secret_) return Error(ErrorCode::io, "it refused: " + describe(Verdict::has_no_secret));
  node_nonce_ = std::string(greeting.substr(kMagicBytes + 2, kNonceBytes));
  std::string hello(kMagic);
  hello += mode(secret_);
  hello += coordinator_nonce_;
  hello += proof(secret_, kCoordinatorLabel, node_nonce_, coordinator_nonce_);
  return hello;
}

Status CoordinatorHandshake::take_answer(std::string_view answer) const {
  if (answer.size() != kAnswerBytes) return Error(ErrorCode::io, "it closed the connection during the handshake");
  const auto verdict = static_cast<Verdict>(answer[0]);
  if (verdict != Verdict::admitted) return Error(ErrorCode::io, "it refused: " + describe(verdict));
  if (!same(answer.substr(1), proof(secret_, kNodeLabel, coordinator_nonce_, node_nonce_))) {
    return Error(ErrorCode::io, "its proof does not check: it does not hold this coordinator's secret");
  }
  return {};
}

}  // namespace accord
