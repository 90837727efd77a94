#include "runtime/io/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace accord {

namespace {

Error io_error(const std::string& what, const std::string& path) {
  return Error(ErrorCode::io, what + " " + path + ": " + std::strerror(errno));
}

// Whether `path` names something other than a regular file (a FIFO, a
// socket, a device, a folder).
bool names_other_than_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode);
}

}  // namespace

// O_NONBLOCK: opening a FIFO for reading blocks until a writer opens it, and
// a model given as a FIFO hung before fstat could refuse it; without a
// writer it now opens at once. It changes nothing for a regular file, and
// nothing is read before fstat says the file is one. O_NOCTTY: a terminal
// named as a model does not become this process's.
Result<MappedFile> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    Error error = io_error("cannot open", path);
    // A socket cannot be opened at all (ENXIO); say what it is.
    if (names_other_than_file(path)) return Error(ErrorCode::io, path + " is not a regular file");
    return error;
  }
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

namespace {

std::size_t page_size() { return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)); }

// Pages [first, end) of the address space, as page numbers.
struct PageSpan {
  std::uintptr_t first;
  std::uintptr_t end;
};

// The pages under `ranges` of the mapping at `base`, sorted and merged.
std::vector<PageSpan> page_spans(const std::byte* base, std::size_t size, std::span<const ByteRange> ranges) {
  const std::size_t page = page_size();
  std::vector<PageSpan> spans;
  for (const ByteRange& r : ranges) {
    if (r.length == 0 || r.offset >= size) continue;
    const auto begin = reinterpret_cast<std::uintptr_t>(base) + r.offset;
    const std::uintptr_t end = begin + std::min(r.length, size - r.offset);
    spans.push_back({begin / page, (end + page - 1) / page});
  }
  std::sort(spans.begin(), spans.end(), [](const PageSpan& a, const PageSpan& b) { return a.first < b.first; });
  std::vector<PageSpan> merged;
  for (const PageSpan& s : spans) {
    if (!merged.empty() && s.first <= merged.back().end) {
      merged.back().end = std::max(merged.back().end, s.end);
    } else {
      merged.push_back(s);
    }
  }
  return merged;
}

// Pages of `span` present in this process's page table: bit 63 of each
// page's 64-bit pagemap entry.
std::size_t present_pages(int pagemap, PageSpan span) {
  constexpr std::uintptr_t kBatch = 4096;
  constexpr std::uint64_t kPresent = std::uint64_t{1} << 63;
  std::vector<std::uint64_t> entries(kBatch);
  std::size_t present = 0;
  for (std::uintptr_t page = span.first; page < span.end; page += kBatch) {
    const std::uintptr_t n = std::min(kBatch, span.end - page);
    const auto want = static_cast<ssize_t>(n * sizeof(std::uint64_t));
    if (::pread(pagemap, entries.data(), static_cast<std::size_t>(want), static_cast<off_t>(page * 8)) != want) {
      return 0;
    }
    for (std::uintptr_t i = 0; i < n; ++i) present += (entries[i] & kPresent) != 0;
  }
  return present;
}

}  // namespace

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14; older kernels refuse it, and pages are touched instead
#endif

void map_pages_in(const std::byte* begin, std::size_t length) {
  const std::uintptr_t page = page_size();
  const auto start = reinterpret_cast<std::uintptr_t>(begin) / page * page;
  const std::uintptr_t end = (reinterpret_cast<std::uintptr_t>(begin) + length + page - 1) / page * page;
  auto* first = reinterpret_cast<std::byte*>(start);
  if (end <= start || ::madvise(first, end - start, MADV_POPULATE_READ) == 0) return;
  // A volatile read is never optimized away.
  for (std::uintptr_t at = 0; at < end - start; at += page) (void)*reinterpret_cast<volatile const char*>(first + at);
}

void release_mapped_pages(const std::byte* begin, std::size_t length) {
  const std::uintptr_t page = page_size();
  const auto start = reinterpret_cast<std::uintptr_t>(begin);
  const std::uintptr_t first = (start + page - 1) / page * page;
  const std::uintptr_t end = (start + length) / page * page;
  if (end > first) ::madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
}

void confine_mapping(std::span<const std::byte> mapping, std::vector<ByteRange> keep) {
  if (mapping.empty()) return;
  const std::size_t page = page_size();
  std::sort(keep.begin(), keep.end(), [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
  auto* base = const_cast<std::byte*>(mapping.data());
  const std::size_t end = (mapping.size() + page - 1) / page * page;
  auto shut = [&](std::size_t from, std::size_t to) {
    if (to <= from) return;
    ::madvise(base + from, to - from, MADV_DONTNEED);
    ::mprotect(base + from, to - from, PROT_NONE);
  };
  std::size_t open_until = 0;  // pages before it are kept or shut
  for (const ByteRange& r : keep) {
    if (r.length == 0) continue;
    const std::size_t first = r.offset / page * page;
    const std::size_t last = std::min(end, (r.offset + r.length + page - 1) / page * page);
    shut(open_until, first);
    open_until = std::max(open_until, last);
  }
  shut(open_until, end);
}

std::size_t MappedFile::resident_bytes(std::span<const ByteRange> ranges) const {
  if (data_ == nullptr) return 0;
  const int pagemap = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (pagemap < 0) return 0;
  std::size_t pages = 0;
  for (const PageSpan& span : page_spans(data_, size_, ranges)) pages += present_pages(pagemap, span);
  ::close(pagemap);
  return pages * page_size();
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)), path_(std::move(other.path_)) {}

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
