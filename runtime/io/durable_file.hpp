// File operations on the real file system with the durability a writer
// needs: data reaches the disk (fsync) before a rename makes it visible,
// and the rename itself is made durable by syncing the folder. The prompt
// cache goes through an Env (env.hpp), whose posix_env() uses these.
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

#include "runtime/base/error.hpp"

namespace accord {

// fsync on a file (never through a link), so that its bytes are durable.
Status sync_file(const std::filesystem::path& path);

// fsync on a folder, so that renames and creations inside it are durable.
Status sync_folder(const std::filesystem::path& folder);

// Lets `body` write PATH.partial, fsyncs it and renames it over `path`, then
// syncs the folder: readers see the old file or the whole new one. A stream
// error or a failed rename is an io error and leaves `path` untouched.
Status write_atomically(const std::filesystem::path& path, const std::function<void(std::ostream&)>& body);

// Reads a whole file, refusing one larger than max_bytes.
Result<std::vector<std::byte>> read_file(const std::filesystem::path& path, std::size_t max_bytes);

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
