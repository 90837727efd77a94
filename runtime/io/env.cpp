#include "runtime/io/env.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/io/durable_file.hpp"

namespace accord {

namespace {

namespace fs = std::filesystem;

Error io_error(const std::string& what, const fs::path& path) {
  return Error(ErrorCode::io, what + " " + path.string() + ": " + std::strerror(errno));
}

Error io_error(const std::string& what, const fs::path& path, const std::error_code& ec) {
  return Error(ErrorCode::io, what + " " + path.string() + ": " + ec.message());
}

class PosixLock final : public EnvLock {
 public:
  explicit PosixLock(FileLock lock) : lock_(std::move(lock)) {}

 private:
  FileLock lock_;
};

class PosixEnv final : public Env {
 public:
  FileType type_of(const fs::path& path) override {
    std::error_code ec;
    switch (fs::symlink_status(path, ec).type()) {
      case fs::file_type::not_found: return FileType::none;
      case fs::file_type::regular: return FileType::regular;
      case fs::file_type::directory: return FileType::folder;
      case fs::file_type::symlink: return FileType::link;
      default: return FileType::other;  // also what cannot be examined (a loop of links)
    }
  }

  Status create_folder(const fs::path& path) override {
    std::error_code ec;
    fs::create_directory(path, ec);
    if (ec) return io_error("cannot create", path, ec);
    return {};
  }

  // O_NOFOLLOW: a link planted where the cache writes is refused, not followed.
  Status write_file(const fs::path& path, std::span<const std::byte> bytes, bool exclusive) override {
    const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (exclusive ? O_EXCL : O_TRUNC);
    const int fd = ::open(path.c_str(), flags, 0644);
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
    if (::close(fd) != 0) return io_error("cannot close", path);
    return {};
  }

  Status sync_file(const fs::path& path) override { return accord::sync_file(path); }

  Status sync_folder(const fs::path& folder) override { return accord::sync_folder(folder); }

  Result<std::vector<std::byte>> read_file(const fs::path& path, std::size_t max_bytes) override {
    return accord::read_file(path, max_bytes);
  }

  Result<std::uint64_t> file_size(const fs::path& path) override {
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) return io_error("cannot read", path, ec);
    return static_cast<std::uint64_t>(size);
  }

  Status rename(const fs::path& from, const fs::path& to) override {
    std::error_code ec;
    fs::rename(from, to, ec);
    if (ec) return io_error("cannot rename to", to, ec);
    return {};
  }

  Status remove(const fs::path& path) override {
    std::error_code ec;
    fs::remove(path, ec);
    if (ec) return io_error("cannot remove", path, ec);
    return {};
  }

  // A range-for over directory_iterator throws on a failed step even with
  // an error_code; this never throws.
  std::vector<std::string> entries(const fs::path& folder) override {
    std::vector<std::string> names;
    std::error_code ec;
    for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
      names.push_back(it->path().filename().string());
    }
    return names;
  }

  Result<fs::path> resolve(const fs::path& path) override {
    std::error_code ec;
    auto real = fs::weakly_canonical(path, ec);
    if (ec) return io_error("cannot resolve", path, ec);
    return real;
  }

  Result<std::unique_ptr<EnvLock>> try_lock(const fs::path& path) override {
    auto lock = FileLock::try_take(path);
    if (!lock) return lock.error();
    if (!*lock) return std::unique_ptr<EnvLock>();
    return std::unique_ptr<EnvLock>(std::make_unique<PosixLock>(std::move(**lock)));
  }
};

}  // namespace

Env& posix_env() {
  static PosixEnv env;
  return env;
}

Status write_file_synced(Env& env, const fs::path& path, std::span<const std::byte> bytes) {
  if (Status ok = env.write_file(path, bytes, true); !ok) return ok;
  return env.sync_file(path);
}

Status create_folders_synced(Env& env, const fs::path& path) {
  std::vector<fs::path> missing;
  fs::path start = path.lexically_normal();
  if (!start.has_filename()) start = start.parent_path();  // a trailing separator
  for (fs::path p = start; !p.empty() && env.type_of(p) == FileType::none; p = p.parent_path()) {
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  const auto sync_parent = [&](const fs::path& p) {
    return env.sync_folder(p.has_parent_path() ? p.parent_path() : ".");
  };
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (Status ok = env.create_folder(*it); !ok) return ok;
    if (Status ok = sync_parent(*it); !ok) return ok;
  }
  // An earlier call may have created `path` and failed to sync: its name
  // is made durable here whatever this call created.
  return missing.empty() ? sync_parent(start) : Status{};
}

Status replace_file_atomically(Env& env, const fs::path& path, const std::string& text) {
  fs::path temporary = path;
  temporary += ".partial";
  // A stale temporary (a killed writer's, or a planted link) goes first.
  if (Status ok = env.remove(temporary); !ok) return ok;
  const auto bytes = std::as_bytes(std::span(text.data(), text.size()));
  if (Status ok = write_file_synced(env, temporary, bytes); !ok) return ok;
  if (Status ok = env.rename(temporary, path); !ok) return ok;
  return env.sync_folder(path.has_parent_path() ? path.parent_path() : ".");
}

Result<fs::path> entry_in(const fs::path& folder, std::string_view name, std::string_view what) {
  constexpr std::size_t kMaxNameBytes = 255;
  const bool plain = !name.empty() && name != "." && name != ".." && name.size() <= kMaxNameBytes &&
                     name.find_first_of(std::string_view("/\0", 2)) == std::string_view::npos;
  if (!plain) {
    return Error(ErrorCode::contract,
                 std::string(what) + " must be a plain name, not a path: '" + printable(name) + "'");
  }
  return folder / fs::path(std::string(name));
}

Result<bool> resolves_inside(Env& env, const fs::path& root, const fs::path& path) {
  auto real_root = env.resolve(root);
  if (!real_root) return real_root.error();
  auto real_path = env.resolve(path);
  if (!real_path) return real_path.error();
  auto p = real_path->begin();
  for (auto r = real_root->begin(); r != real_root->end(); ++r, ++p) {
    if (r->empty()) continue;  // trailing separator
    if (p == real_path->end() || *r != *p) return false;
  }
  return true;
}

}  // namespace accord
