// Stop sequences over streamed text: the text a client may see now, held
// back while it could still be the start of a stop sequence (or of a
// UTF-8 character), and cut before the first stop sequence found.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace accord::serve {

class StopFilter {
 public:
  explicit StopFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Adds generated text; returns what may be sent now. Once a stop
  // sequence is found, stopped() is true and nothing more is returned.
  std::string push(std::string_view piece);
  // At the end of generation: the text still held (none once stopped).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  // Bytes at the end of pending_ that may begin a stop sequence or are an
  // unfinished UTF-8 character.
  std::size_t held_bytes() const;

  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace accord::serve
