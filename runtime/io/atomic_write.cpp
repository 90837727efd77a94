#include "runtime/io/atomic_write.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace accord {

Status write_atomically(const std::string& path, const std::function<void(std::ostream&)>& body) {
  const std::string temporary = path + ".partial";
  std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
  if (!out) return Error(ErrorCode::io, "cannot create " + temporary + ": " + std::strerror(errno));
  body(out);
  out.close();
  if (!out) return Error(ErrorCode::io, "cannot write " + temporary + ": " + std::strerror(errno));
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) return Error(ErrorCode::io, "cannot rename " + temporary + " to " + path + ": " + ec.message());
  return {};
}

}  // namespace accord
