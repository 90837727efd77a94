#include "runtime/io/mem_env.hpp"

#include <algorithm>
#include <set>
#include <utility>

namespace accord {

namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kRootId = 0;

using Names = std::vector<std::string>;

// The names below the root in `path`: a relative path starts at "/", and
// ".", "..", repeated and trailing separators go as lexically_normal drops them.
Names names_of(const fs::path& path) {
  Names names;
  for (const fs::path& part : (fs::path("/") / path).lexically_normal()) {
    std::string name = part.string();
    if (name.empty() || name == "/" || name == "." || name == "..") continue;
    names.push_back(std::move(name));
  }
  return names;
}

fs::path path_of(const Names& names) {
  fs::path path("/");
  for (const std::string& name : names) path /= name;
  return path;
}

Names parent_of(Names names) {
  names.pop_back();
  return names;
}

Error failure(std::string_view what, const Names& names, std::string_view why) {
  return Error(ErrorCode::io, "cannot " + std::string(what) + " " + path_of(names).string() + ": " + std::string(why));
}

}  // namespace

struct MemEnv::Locks {
  std::set<std::string> held;
  // Bumped by a crash, so that a lock taken before it unlocks nothing when
  // destroyed after it (the path may be locked again by then).
  std::uint64_t generation = 0;
};

class MemEnv::Lock final : public EnvLock {
 public:
  Lock(std::shared_ptr<Locks> locks, std::string path)
      : locks_(std::move(locks)), path_(std::move(path)), generation_(locks_->generation) {}
  ~Lock() override {
    if (locks_->generation == generation_) locks_->held.erase(path_);
  }

 private:
  std::shared_ptr<Locks> locks_;
  std::string path_;
  std::uint64_t generation_;
};

MemEnv::MemEnv() : locks_(std::make_shared<Locks>()) { inodes_[kRootId].folder = true; }

void MemEnv::crash() {
  for (auto& [id, node] : inodes_) {
    node.entries = node.durable_entries;
    node.data = node.durable;
  }
  locks_->held.clear();
  ++locks_->generation;
  collect();
}

void MemEnv::set_fault_hook(FaultHook hook) { hook_ = std::move(hook); }

std::optional<std::uint64_t> MemEnv::find(const Names& names) const {
  std::uint64_t id = kRootId;
  for (const std::string& name : names) {
    const Inode& folder = inodes_.find(id)->second;
    if (!folder.folder) return std::nullopt;
    const auto entry = folder.entries.find(name);
    if (entry == folder.entries.end()) return std::nullopt;
    id = entry->second;
  }
  return id;
}

MemEnv::Inode* MemEnv::inode(const Names& names) {
  const std::optional<std::uint64_t> id = find(names);
  return id ? &inodes_.find(*id)->second : nullptr;
}

// The folder holding names.back(); nullptr when missing or a file, or for the root.
MemEnv::Inode* MemEnv::parent(const Names& names) {
  if (names.empty()) return nullptr;
  Inode* folder = inode(parent_of(names));
  return folder && folder->folder ? folder : nullptr;
}

MemEnv::Inode* MemEnv::file(const Names& names) {
  Inode* found = inode(names);
  return found && !found->folder ? found : nullptr;
}

std::uint64_t MemEnv::add(bool folder) {
  const std::uint64_t id = next_id_++;
  inodes_[id].folder = folder;
  return id;
}

Status MemEnv::fault(std::string_view operation, const Names& names) const {
  const fs::path path = path_of(names);
  if (!hook_ || !hook_(operation, path)) return {};
  return Error(ErrorCode::io, "injected disk fault: " + std::string(operation) + " " + path.string());
}

// As rename(2): a file may replace a file, a folder only an empty folder.
Status MemEnv::replaceable(const Names& target, bool folder) {
  const Inode* existing = inode(target);
  if (!existing) return {};
  if (existing->folder != folder) return failure("rename onto", target, folder ? "it is a file" : "it is a folder");
  if (folder && !existing->entries.empty()) return failure("rename onto", target, "the folder is not empty");
  return {};
}

// Drops the inodes that neither the current names nor the synced ones reach
// (removed, or replaced by a rename), so a long simulation does not grow.
void MemEnv::collect() {
  std::set<std::uint64_t> live;
  std::vector<std::uint64_t> pending{kRootId};
  while (!pending.empty()) {
    const std::uint64_t id = pending.back();
    pending.pop_back();
    if (!live.insert(id).second) continue;
    const Inode& node = inodes_.find(id)->second;
    for (const auto& [name, child] : node.entries) pending.push_back(child);
    for (const auto& [name, child] : node.durable_entries) pending.push_back(child);
  }
  std::erase_if(inodes_, [&](const auto& item) { return !live.contains(item.first); });
}

FileType MemEnv::type_of(const fs::path& path) {
  const Inode* found = inode(names_of(path));
  if (!found) return FileType::none;
  return found->folder ? FileType::folder : FileType::regular;
}

Status MemEnv::create_folder(const fs::path& path) {
  const Names names = names_of(path);
  if (Status injected = fault("create_folder", names); !injected) return injected;
  if (const Inode* existing = inode(names)) {
    return existing->folder ? Status() : failure("create folder", names, "a file is in the way");
  }
  Inode* folder = parent(names);
  if (!folder) return failure("create folder", names, "no such parent folder");
  folder->entries[names.back()] = add(true);
  return {};
}

Status MemEnv::write_file(const fs::path& path, std::span<const std::byte> bytes, bool exclusive) {
  const Names names = names_of(path);
  if (Status injected = fault("write", names); !injected) return injected;
  Inode* target = inode(names);
  if (target && target->folder) return failure("write", names, "it is a folder");
  if (target && exclusive) return failure("write", names, "it exists");
  if (!target) {
    Inode* folder = parent(names);
    if (!folder) return failure("write", names, "no such folder");
    const std::uint64_t id = add(false);
    folder->entries[names.back()] = id;
    target = &inodes_.find(id)->second;
  }
  target->data.assign(bytes.begin(), bytes.end());  // a replaced file keeps its inode and synced bytes
  return {};
}

Status MemEnv::sync_file(const fs::path& path) {
  const Names names = names_of(path);
  if (Status injected = fault("sync", names); !injected) return injected;
  Inode* found = file(names);
  if (!found) return failure("sync", names, "no such file");
  found->durable = found->data;
  return {};
}

Status MemEnv::sync_folder(const fs::path& folder) {
  const Names names = names_of(folder);
  if (Status injected = fault("sync_folder", names); !injected) return injected;
  Inode* found = inode(names);
  if (!found || !found->folder) return failure("sync folder", names, "no such folder");
  found->durable_entries = found->entries;
  return {};
}

Result<std::vector<std::byte>> MemEnv::read_file(const fs::path& path, std::size_t max_bytes) {
  const Names names = names_of(path);
  if (Status injected = fault("read", names); !injected) return injected.error();
  const Inode* found = file(names);
  if (!found) return failure("read", names, "no such file");
  if (found->data.size() > max_bytes) {
    return Error(ErrorCode::io, path_of(names).string() + " is " + std::to_string(found->data.size()) +
                                    " bytes, more than the " + std::to_string(max_bytes) + " expected");
  }
  return found->data;
}

Result<std::uint64_t> MemEnv::file_size(const fs::path& path) {
  const Names names = names_of(path);
  const Inode* found = file(names);
  if (!found) return failure("read the size of", names, "no such file");
  return static_cast<std::uint64_t>(found->data.size());
}

Status MemEnv::rename(const fs::path& from, const fs::path& to) {
  const Names source = names_of(from);
  const Names target = names_of(to);
  if (Status injected = fault("rename", source); !injected) return injected;
  const std::optional<std::uint64_t> id = find(source);
  if (!id) return failure("rename", source, "no such file or folder");
  if (source == target) return {};  // as rename(2): nothing to do
  if (source.empty() || target.empty()) return failure("rename", source, "the root cannot move or be replaced");
  const bool folder = inodes_.find(*id)->second.folder;
  if (target.size() > source.size() && std::equal(source.begin(), source.end(), target.begin())) {
    return failure("rename", source, "a folder cannot move below itself");
  }
  Inode* destination = parent(target);
  if (!destination) return failure("rename onto", target, "no such folder");
  if (Status allowed = replaceable(target, folder); !allowed) return allowed;
  parent(source)->entries.erase(source.back());
  destination->entries[target.back()] = *id;
  collect();
  return {};
}

Status MemEnv::remove(const fs::path& path) {
  const Names names = names_of(path);
  if (Status injected = fault("remove", names); !injected) return injected;
  const Inode* found = inode(names);
  if (!found) return {};
  if (names.empty()) return failure("remove", names, "the root stays");
  if (found->folder && !found->entries.empty()) return failure("remove", names, "the folder is not empty");
  parent(names)->entries.erase(names.back());
  collect();
  return {};
}

std::vector<std::string> MemEnv::entries(const fs::path& folder) {
  std::vector<std::string> names;
  const Inode* found = inode(names_of(folder));
  if (!found || !found->folder) return names;
  for (const auto& [name, id] : found->entries) names.push_back(name);  // a map: already sorted
  return names;
}

Result<fs::path> MemEnv::resolve(const fs::path& path) { return path_of(names_of(path)); }

// As open(O_CREAT) and flock: the file is made when missing, durable only
// once its folder is synced.
Result<std::unique_ptr<EnvLock>> MemEnv::try_lock(const fs::path& path) {
  const Names names = names_of(path);
  const Inode* found = inode(names);
  if (found && found->folder) return failure("lock", names, "it is a folder");
  if (!found) {
    Inode* folder = parent(names);
    if (!folder) return failure("lock", names, "no such folder");
    folder->entries[names.back()] = add(false);
  }
  std::string key = path_of(names).string();
  if (!locks_->held.insert(key).second) return std::unique_ptr<EnvLock>();
  return std::unique_ptr<EnvLock>(std::make_unique<Lock>(locks_, std::move(key)));
}

}  // namespace accord
