// Progress of long work on a terminal: a model load, a long prefill. One
// status line, redrawn in place and cleared when the work ends, so the
// terminal keeps only the log. Where stderr is not a terminal (a log file,
// a pipe, a service manager) nothing is shown: no control characters end
// up in logs.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace accord::serve {

// "loading NAME: 45% (51.2 of 114.0 MB)"
std::string load_progress_line(std::string_view name, std::uint64_t done_bytes, std::uint64_t total_bytes);
// "prefill, 512 tokens: layer 6 of 12"
std::string prefill_progress_line(int tokens, int units_done, int units);

class TerminalProgress {
 public:
  using Writer = std::function<void(std::string_view text)>;
  // Draws on stderr where it is a terminal, else nowhere.
  TerminalProgress();
  // Draws with `write` (tests), redrawing at most once per `min_interval`.
  TerminalProgress(Writer write, std::chrono::milliseconds min_interval);
  TerminalProgress(const TerminalProgress&) = delete;
  TerminalProgress& operator=(const TerminalProgress&) = delete;

  bool enabled() const { return static_cast<bool>(write_); }
  // Shows `line` in place of the last one; skipped when the last was drawn
  // under min_interval ago, unless `last` (the work's final state).
  void show(const std::string& line, bool last = false);
  // Removes the line (the work ended).
  void clear();

 private:
  using Clock = std::chrono::steady_clock;
  Writer write_;
  std::chrono::milliseconds min_interval_;
  std::mutex mutex_;
  Clock::time_point drawn_{};
  bool showing_ = false;
};

}  // namespace accord::serve
