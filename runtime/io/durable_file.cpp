#include "runtime/io/durable_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace accord {

namespace {

Error io_error(const std::string& what, const std::filesystem::path& path) {
  return Error(ErrorCode::io, what + " " + path.string() + ": " + std::strerror(errno));
}

}  // namespace

namespace {

// fsync through a descriptor of its own, opened with `flags`.
Status sync_path(const std::filesystem::path& path, int flags, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | flags);
  if (fd < 0) return io_error("cannot open " + what, path);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return io_error("cannot fsync " + what, path);
  return {};
}

}  // namespace

Status sync_file(const std::filesystem::path& path) { return sync_path(path, O_NOFOLLOW, "file"); }

Status sync_folder(const std::filesystem::path& folder) { return sync_path(folder, O_DIRECTORY, "folder"); }

Status write_atomically(const std::filesystem::path& path, const std::function<void(std::ostream&)>& body) {
  std::filesystem::path temporary = path;
  temporary += ".partial";
  // A stale temporary (left by a killed writer, or planted as a link) is
  // unlinked first, so the stream below never writes through a link.
  std::error_code ignored;
  std::filesystem::remove(temporary, ignored);
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return io_error("cannot create", temporary);
    body(out);
    out.close();
    if (!out) return io_error("cannot write", temporary);
  }
  // std::ofstream cannot fsync; a second descriptor on the same file can.
  if (Status synced = sync_file(temporary); !synced) return synced;
  if (::rename(temporary.c_str(), path.c_str()) != 0) return io_error("cannot rename over", path);
  const std::filesystem::path folder = path.has_parent_path() ? path.parent_path() : ".";
  return sync_folder(folder);
}

Result<std::vector<std::byte>> read_file(const std::filesystem::path& path, std::size_t max_bytes) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return Error(ErrorCode::io, "cannot read " + path.string() + ": " + ec.message());
  if (size > max_bytes) {
    return Error(ErrorCode::io, path.string() + " is " + std::to_string(size) + " bytes, more than the " +
                                    std::to_string(max_bytes) + " expected");
  }
  std::vector<std::byte> bytes(static_cast<std::size_t>(size));
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()))) {
    return Error(ErrorCode::io, "cannot read " + path.string());
  }
  return bytes;
}

Result<std::optional<FileLock>> FileLock::try_take(const std::filesystem::path& path) {
  // O_NOFOLLOW: a link planted in the lock's place is refused, not followed.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return io_error("cannot open the lock file", path);
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    const bool busy = errno == EWOULDBLOCK;
    Error error = io_error("cannot lock", path);
    ::close(fd);
    if (busy) return std::optional<FileLock>();
    return error;
  }
  return std::optional<FileLock>(FileLock(fd));
}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the lock
}

}  // namespace accord
