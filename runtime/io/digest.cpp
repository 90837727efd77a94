#include "runtime/io/digest.hpp"

#include <openssl/evp.h>
#include <xxhash.h>

#include <cstdio>
#include <stdexcept>

namespace accord {

namespace {

std::string to_hex(const unsigned char* bytes, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(n * 2, '0');
  for (std::size_t i = 0; i < n; ++i) {
    hex[2 * i] = kDigits[bytes[i] >> 4];
    hex[2 * i + 1] = kDigits[bytes[i] & 0xF];
  }
  return hex;
}

}  // namespace

std::string sha256_hex(std::span<const std::byte> bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("OpenSSL SHA-256 failed");
  }
  return to_hex(digest, length);
}

std::string token_ids_sha256(std::span<const int> ids) {
  std::vector<std::byte> bytes(ids.size() * 4);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto v = static_cast<std::uint32_t>(ids[i]);
    for (int b = 0; b < 4; ++b) bytes[4 * i + static_cast<std::size_t>(b)] = static_cast<std::byte>(v >> (8 * b));
  }
  return sha256_hex(bytes);
}

struct FastDigest::State {
  XXH3_state_t* xxh = XXH3_createState();
};

FastDigest::FastDigest() : state_(std::make_unique<State>()) {
  if (state_->xxh == nullptr) throw std::bad_alloc();
  XXH3_128bits_reset(state_->xxh);
}

FastDigest::~FastDigest() { XXH3_freeState(state_->xxh); }

FastDigest& FastDigest::update(const void* data, std::size_t bytes) {
  XXH3_128bits_update(state_->xxh, data, bytes);
  return *this;
}

std::string FastDigest::hex() const {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits_digest(state_->xxh));
  return to_hex(canonical.digest, sizeof canonical.digest);
}

}  // namespace accord
