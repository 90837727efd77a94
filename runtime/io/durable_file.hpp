// File operations with the durability the prompt cache needs: data reaches
// the disk (fsync) before a rename makes it visible, and the rename itself
// is made durable by syncing the folder.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <ostream>
#include <span>
#include <string>
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

// True when `path`, with every symbolic link resolved, lies inside `root`.
bool stays_inside(const std::filesystem::path& root, const std::filesystem::path& path);

}  // namespace accord
