// A read-only memory mapping of a whole file. Move-only; unmaps on
// destruction. Weights are read where they lie, so a Model keeps its
// MappedFile alive for as long as anything points into it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/base/error.hpp"

namespace accord {

// Bytes [offset, offset + length) of a file.
struct ByteRange {
  std::size_t offset = 0;
  std::size_t length = 0;
};

// Maps every page touching [begin, begin + length) of a file mapping into
// this process at once (MADV_POPULATE_READ; on a kernel without it, by
// reading a byte of each page): cheaper than a page fault per page.
void map_pages_in(const std::byte* begin, std::size_t length);

// Unmaps the whole pages inside [begin, begin + length) of a read-only
// private file mapping from this process (MADV_DONTNEED); they are read
// again from the file (or the page cache) when next touched. Never for
// other memory: anonymous pages would come back as zeros.
void release_mapped_pages(const std::byte* begin, std::size_t length);

// Makes every page of a read-only private file mapping (`mapping`, from
// its page-aligned start) that touches none of `keep` (offsets into it)
// inaccessible, and unmaps it from the process. Then nothing but the kept
// bytes can be mapped in, not even by the kernel's fault-around, which
// maps a faulting page's neighbours (a whole large folio on recent
// kernels); a read of the rest is a segmentation fault, not a silent use.
void confine_mapping(std::span<const std::byte> mapping, std::vector<ByteRange> keep);

class MappedFile {
 public:
  // A regular file only: a FIFO, socket, device or folder is refused at
  // once ("PATH is not a regular file"), never waited on.
  static Result<MappedFile> open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Bytes of the pages touching `ranges` that are mapped into this process
  // now (/proc/self/pagemap), each page counted once; 0 when unknown.
  // mincore would count what the page cache holds, whoever reads it.
  std::size_t resident_bytes(std::span<const ByteRange> ranges) const;

 private:
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::string path_;
};

}  // namespace accord
