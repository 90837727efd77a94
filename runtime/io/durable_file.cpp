#include "runtime/io/durable_file.hpp"

#include <fcntl.h>
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

Status write_file_synced(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot create", path);
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Error error = io_error("cannot write", path);
      ::close(fd);
      return error;
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    Error error = io_error("cannot fsync", path);
    ::close(fd);
    return error;
  }
  if (::close(fd) != 0) return io_error("cannot close", path);
  return {};
}

Status sync_folder(const std::filesystem::path& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open folder", folder);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return io_error("cannot fsync folder", folder);
  return {};
}

Status write_atomically(const std::filesystem::path& path, const std::function<void(std::ostream&)>& body) {
  std::filesystem::path temporary = path;
  temporary += ".partial";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return io_error("cannot create", temporary);
    body(out);
    out.close();
    if (!out) return io_error("cannot write", temporary);
  }
  // std::ofstream cannot fsync; a second descriptor on the same file can.
  const int fd = ::open(temporary.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open", temporary);
  const int synced = ::fsync(fd);
  ::close(fd);
  if (synced != 0) return io_error("cannot fsync", temporary);
  if (::rename(temporary.c_str(), path.c_str()) != 0) return io_error("cannot rename over", path);
  const std::filesystem::path folder = path.has_parent_path() ? path.parent_path() : ".";
  return sync_folder(folder);
}

Status replace_file_atomically(const std::filesystem::path& path, const std::string& text) {
  return write_atomically(path, [&](std::ostream& out) { out << text; });
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

bool stays_inside(const std::filesystem::path& root, const std::filesystem::path& path) {
  std::error_code ec1, ec2;
  const auto real_root = std::filesystem::weakly_canonical(root, ec1);
  const auto real_path = std::filesystem::weakly_canonical(path, ec2);
  if (ec1 || ec2) return false;
  auto r = real_root.begin();
  auto p = real_path.begin();
  for (; r != real_root.end(); ++r, ++p) {
    if (r->empty()) continue;  // trailing separator
    if (p == real_path.end() || *r != *p) return false;
  }
  return true;
}

}  // namespace accord
