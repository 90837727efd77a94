#include "runtime/serve/progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace accord::serve {

namespace {

constexpr std::string_view kEraseLine = "\r\033[K";

std::string megabytes(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", static_cast<double>(bytes) / 1e6);
  return text;
}

}  // namespace

std::string load_progress_line(std::string_view name, std::uint64_t done_bytes, std::uint64_t total_bytes) {
  const std::uint64_t percent = total_bytes == 0 ? 100 : done_bytes * 100 / total_bytes;
  return "loading " + std::string(name) + ": " + std::to_string(percent) + "% (" + megabytes(done_bytes) + " of " +
         megabytes(total_bytes) + " MB)";
}

std::string prefill_progress_line(int tokens, int units_done, int units) {
  return "prefill, " + std::to_string(tokens) + " tokens: layer " + std::to_string(units_done) + " of " +
         std::to_string(units);
}

TerminalProgress::TerminalProgress() : min_interval_(100) {
  if (isatty(STDERR_FILENO) == 1) {
    write_ = [](std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stderr);
      std::fflush(stderr);
    };
  }
}

TerminalProgress::TerminalProgress(Writer write, std::chrono::milliseconds min_interval)
    : write_(std::move(write)), min_interval_(min_interval) {}

void TerminalProgress::show(const std::string& line, bool last) {
  if (!write_) return;
  std::lock_guard lock(mutex_);
  const Clock::time_point now = Clock::now();
  if (showing_ && !last && now - drawn_ < min_interval_) return;
  write_(std::string(kEraseLine) + line);
  drawn_ = now;
  showing_ = true;
}

void TerminalProgress::clear() {
  if (!write_) return;
  std::lock_guard lock(mutex_);
  if (!showing_) return;
  write_(kEraseLine);
  showing_ = false;
}

}  // namespace accord::serve
