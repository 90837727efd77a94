// What one rank holds of a model's weights, as reports carry it
// (docs/residency.md). Protocol types only: no CAF include.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace accord {

struct WeightShare {
  std::map<std::string, std::uint64_t> bytes_by_type;  // the rank's tensors as held in memory: "F32", "Q8_0", ...
  std::uint64_t bytes = 0;                             // their sum
  std::uint64_t resident_bytes = 0;                    // of them, mapped into the rank's process now (measured)
  std::string residency = "resident";                  // or "layered" (--max-resident-bytes)
  std::uint64_t budget_bytes = 0;                      // layered: the most it keeps resident
  std::uint64_t streamed_bytes_per_step = 0;           // layered: read again each step
  std::uint64_t streamed_bytes = 0;                    // layered: read again so far

  bool operator==(const WeightShare&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, WeightShare& x) {
  return f(x.bytes_by_type, x.bytes, x.resident_bytes, x.residency, x.budget_bytes, x.streamed_bytes_per_step,
           x.streamed_bytes);
}

}  // namespace accord
