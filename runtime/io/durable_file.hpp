// File operations with the durability the prompt cache needs: data reaches
// the disk (fsync) before a rename makes it visible, and the rename itself
// is made durable by syncing the folder.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "runtime/error.hpp"

namespace accord {

// Creates `path` (which must not exist), writes `bytes`, fsyncs, closes.
Status write_file_synced(const std::filesystem::path& path, std::span<const std::byte> bytes);

// fsync on a folder, so that renames and creations inside it are durable.
Status sync_folder(const std::filesystem::path& folder);

// Lets `body` write PATH.partial, fsyncs it and renames it over `path`, then
// syncs the folder: readers see the old file or the whole new one. A stream
// error or a failed rename is an io error and leaves `path` untouched.
Status write_atomically(const std::filesystem::path& path, const std::function<void(std::ostream&)>& body);

// write_atomically with `text` as the whole contents.
Status replace_file_atomically(const std::filesystem::path& path, const std::string& text);

// Reads a whole file, refusing one larger than max_bytes.
Result<std::vector<std::byte>> read_file(const std::filesystem::path& path, std::size_t max_bytes);

// Whether `path`, with every symbolic link resolved, lies inside `root`; an
// io error when either cannot be resolved (a loop of links, no permission).
Result<bool> resolves_inside(const std::filesystem::path& root, const std::filesystem::path& path);

// True when `path` exists as a folder of its own: not a symbolic link, not
// a file. The prompt cache writes and deletes only inside such folders.
bool is_real_folder(const std::filesystem::path& path);

// The names in a folder, without following links below it; empty when the
// folder cannot be read. (A range-for over directory_iterator throws on a
// failed step even with an error_code; this never throws.)
std::vector<std::string> folder_entries(const std::filesystem::path& folder);

// An exclusive flock(2) on a file, held until the object is destroyed or
// the process dies (the kernel releases it then, so a killed writer never
// leaves a cache locked).
class FileLock {
 public:
  // Takes the lock on `path`, created when missing, without waiting:
  // nullopt when another open file holds it, in this process or another.
  static Result<std::optional<FileLock>> try_take(const std::filesystem::path& path);

  FileLock(FileLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace accord
