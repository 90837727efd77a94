// Digests: SHA-256 (OpenSSL) where a checksum protects data on disk, and a
// fast 128-bit XXH3 where a digest identifies large in-memory data (model
// weights, KV state) and speed matters more than resistance to forgery.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace accord {

// SHA-256 of `bytes`, as 64 lowercase hex digits.
std::string sha256_hex(std::span<const std::byte> bytes);

// SHA-256 of token ids written as little-endian u32, as the prompt cache
// manifest records them.
std::string token_ids_sha256(std::span<const int> ids);

// An incremental XXH3-128 digest.
class FastDigest {
 public:
  FastDigest();
  ~FastDigest();
  FastDigest(const FastDigest&) = delete;
  FastDigest& operator=(const FastDigest&) = delete;

  FastDigest& update(const void* data, std::size_t bytes);
  template <class T>
  FastDigest& update_value(const T& value) {
    return update(&value, sizeof value);
  }
  // 32 lowercase hex digits.
  std::string hex() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace accord
