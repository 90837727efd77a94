// The simulator's disk (docs/simulation.md): an in-memory Env that loses, on
// crash(), exactly what a real file system is allowed to lose. A file's
// bytes survive once sync_file() returned; a name in a folder (a creation,
// rename or removal) survives once sync_folder() on that folder returned.
// A real disk forgives a missing sync most days; MemEnv never does, so a
// run of the simulator proves the prompt cache syncs what it relies on.
//
// Files and folders are inodes, as on disk: a rename moves the same file,
// synced bytes and all, and a crash puts back each folder's synced names
// without copying data. A fault hook fails any operation on demand, and a
// crash frees every lock, as the death of the holding processes would.
// There are no links: resolve() only normalizes.
//
// Threading: not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/io/env.hpp"

namespace accord {

class MemEnv final : public Env {
 public:
  // Gets the operation ("write", "sync", "sync_folder", "rename", "remove",
  // "create_folder", "read") and its normalized path; true fails it.
  using FaultHook = std::function<bool(std::string_view operation, const std::filesystem::path& path)>;

  // An empty root folder, already durable.
  MemEnv();

  // Power loss: every folder goes back to its synced names, every file to
  // its synced bytes (empty if never synced), and every lock is released.
  void crash();
  // A failed operation changes nothing. An empty hook fails nothing.
  void set_fault_hook(FaultHook hook);

  FileType type_of(const std::filesystem::path& path) override;
  Status create_folder(const std::filesystem::path& path) override;
  Status write_file(const std::filesystem::path& path, std::span<const std::byte> bytes, bool exclusive) override;
  Status sync_file(const std::filesystem::path& path) override;
  Status sync_folder(const std::filesystem::path& folder) override;
  Result<std::vector<std::byte>> read_file(const std::filesystem::path& path, std::size_t max_bytes) override;
  Result<std::uint64_t> file_size(const std::filesystem::path& path) override;
  Status rename(const std::filesystem::path& from, const std::filesystem::path& to) override;
  Status remove(const std::filesystem::path& path) override;
  std::vector<std::string> entries(const std::filesystem::path& folder) override;
  Result<std::filesystem::path> resolve(const std::filesystem::path& path) override;
  Result<std::unique_ptr<EnvLock>> try_lock(const std::filesystem::path& path) override;

 private:
  // Either a file (data) or a folder (entries); durable* is what a crash keeps.
  struct Inode {
    bool folder = false;
    std::vector<std::byte> data;
    std::vector<std::byte> durable;
    std::map<std::string, std::uint64_t> entries;
    std::map<std::string, std::uint64_t> durable_entries;
  };
  struct Locks;  // shared with the EnvLocks, which may outlive a crash or the MemEnv
  class Lock;
  using Names = std::vector<std::string>;  // a normalized path below the root

  std::optional<std::uint64_t> find(const Names& names) const;
  Inode* inode(const Names& names);
  Inode* parent(const Names& names);
  Inode* file(const Names& names);
  std::uint64_t add(bool folder);
  Status fault(std::string_view operation, const Names& names) const;
  Status replaceable(const Names& target, bool folder);
  void collect();

  std::map<std::uint64_t, Inode> inodes_;
  std::uint64_t next_id_ = 1;
  FaultHook hook_;
  std::shared_ptr<Locks> locks_;
};

}  // namespace accord
