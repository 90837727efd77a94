#include "apps/accord/options.hpp"

#include <charconv>
#include <cstdint>
#include <limits>
#include <string>

namespace accord::cli {

CLI::Validator seed_range() {
  return CLI::Validator(
      [](std::string& text) {
        std::uint64_t seed = 0;
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, seed);
        if (!text.empty() && error == std::errc() && stop == end) return std::string();
        return "expected a whole number from 0 to " + std::to_string(std::numeric_limits<std::uint64_t>::max()) +
               ", got '" + text + "'";
      },
      "");
}

}  // namespace accord::cli
