// Every file operation of the prompt cache goes through an Env, as leveldb's
// do: the real file system (posix_env()) in the product, an in-memory one
// (MemEnv, mem_env.hpp) in the simulator and in tests, which can lose
// what was not synced, fail an operation, and undo a rename that was not
// made durable.
//
// The durability contract the cache relies on, and that MemEnv enforces:
// a file's bytes survive a crash once sync_file() returned; a creation,
// rename or removal survives once sync_folder() on its folder returned.
//
// Threading: posix_env() is safe from any thread; a MemEnv is not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.hpp"

namespace accord {

enum class FileType { none, regular, folder, link, other };

// An exclusive writer lock on a file, held until destroyed.
class EnvLock {
 public:
  virtual ~EnvLock() = default;
};

class Env {
 public:
  virtual ~Env() = default;

  // What `path` is, without following a link at its end.
  virtual FileType type_of(const std::filesystem::path& path) = 0;
  // Creates one folder; an existing folder is fine.
  virtual Status create_folder(const std::filesystem::path& path) = 0;
  // Writes `bytes` as the whole file, which must not exist (exclusive) or
  // is replaced. Not durable until sync_file.
  virtual Status write_file(const std::filesystem::path& path, std::span<const std::byte> bytes, bool exclusive) = 0;
  virtual Status sync_file(const std::filesystem::path& path) = 0;
  // Makes the creations, renames and removals inside `folder` durable.
  virtual Status sync_folder(const std::filesystem::path& folder) = 0;
  // Reads a whole file, refusing one larger than max_bytes.
  virtual Result<std::vector<std::byte>> read_file(const std::filesystem::path& path, std::size_t max_bytes) = 0;
  virtual Result<std::uint64_t> file_size(const std::filesystem::path& path) = 0;
  virtual Status rename(const std::filesystem::path& from, const std::filesystem::path& to) = 0;
  // Removes a file or an empty folder; nothing there is fine.
  virtual Status remove(const std::filesystem::path& path) = 0;
  // The names in a folder; empty when it cannot be read.
  virtual std::vector<std::string> entries(const std::filesystem::path& folder) = 0;
  // `path` with every link resolved, as far as it exists.
  virtual Result<std::filesystem::path> resolve(const std::filesystem::path& path) = 0;
  // Takes the lock on `path` (created when missing, never through a link)
  // without waiting: nullptr when another holder has it.
  virtual Result<std::unique_ptr<EnvLock>> try_lock(const std::filesystem::path& path) = 0;
};

// The real file system.
Env& posix_env();

// Creates `path` (which must not exist), writes `bytes` and syncs it.
Status write_file_synced(Env& env, const std::filesystem::path& path, std::span<const std::byte> bytes);

// Creates `path` and every missing folder above it, each made durable by
// syncing the folder it was created in (a crash could lose it otherwise);
// when `path` exists already, syncs the folder that holds it.
Status create_folders_synced(Env& env, const std::filesystem::path& path);

// Writes PATH.partial, syncs it and renames it over `path`, then syncs the
// folder: readers see the old file or the whole new one.
Status replace_file_atomically(Env& env, const std::filesystem::path& path, const std::string& text);

// `folder`/`name` when `name` is a plain name: not empty, not "." or "..",
// without a separator or NUL, at most 255 bytes. Otherwise a contract error
// that calls it `what` ("the model name").
Result<std::filesystem::path> entry_in(const std::filesystem::path& folder, std::string_view name,
                                       std::string_view what);

// Whether `path`, with every link resolved, lies inside `root`.
Result<bool> resolves_inside(Env& env, const std::filesystem::path& root, const std::filesystem::path& path);

}  // namespace accord
