#include "runtime/serve/stop_filter.hpp"

#include <algorithm>
#include <utility>

namespace accord::serve {

namespace {

// Bytes of an unfinished UTF-8 character at the end of `text`.
std::size_t unfinished_utf8(std::string_view text) {
  const std::size_t look = std::min<std::size_t>(text.size(), 3);
  for (std::size_t back = 1; back <= look; ++back) {
    const auto byte = static_cast<unsigned char>(text[text.size() - back]);
    if ((byte & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const std::size_t length = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1;
    return length > back ? back : 0;
  }
  return 0;
}

}  // namespace

std::string StopFilter::push(std::string_view piece) {
  if (stopped_) return {};
  pending_ += piece;
  std::size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, pending_.find(stop));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  const std::size_t ready = pending_.size() - held_bytes();
  std::string out = pending_.substr(0, ready);
  pending_.erase(0, ready);
  return out;
}

std::string StopFilter::flush() {
  if (stopped_) return {};
  return std::exchange(pending_, {});
}

std::size_t StopFilter::held_bytes() const {
  std::size_t held = unfinished_utf8(pending_);
  const std::string_view text(pending_);
  for (const std::string& stop : stops_) {
    // The longest proper prefix of `stop` that `text` ends with.
    for (std::size_t length = std::min(stop.size() - 1, text.size()); length > held; --length) {
      if (text.ends_with(std::string_view(stop).substr(0, length))) {
        held = length;
        break;
      }
    }
  }
  return held;
}

}  // namespace accord::serve
