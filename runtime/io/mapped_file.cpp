#include "runtime/io/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <utility>
#include <vector>

namespace accord {

namespace {

Error io_error(const std::string& what, const std::string& path) {
  return Error(ErrorCode::io, what + " " + path + ": " + std::strerror(errno));
}

}  // namespace

Result<MappedFile> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open", path);
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    Error error = io_error("cannot stat", path);
    ::close(fd);
    return error;
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return Error(ErrorCode::io, path + " is not a regular file");
  }
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<std::size_t>(info.st_size);
  if (file.size_ > 0) {
    void* data = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
      Error error = io_error("cannot map", path);
      ::close(fd);
      return error;
    }
    file.data_ = static_cast<const std::byte*>(data);
  }
  ::close(fd);
  return file;
}

std::size_t MappedFile::resident_bytes() const {
  if (data_ == nullptr) return 0;
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> pages((size_ + page - 1) / page);
  if (::mincore(const_cast<std::byte*>(data_), size_, pages.data()) != 0) return 0;
  std::size_t resident = 0;
  for (unsigned char p : pages) resident += (p & 1) ? page : 0;
  return std::min(resident, size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

}  // namespace accord
