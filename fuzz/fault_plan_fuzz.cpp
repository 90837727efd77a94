// libFuzzer target: the fault-plan syntax of --fault and ACCORD_FAULTS. Any
// input gives a plan or a clear error; an error has no byte a terminal would
// act on, and every fault parsed prints as an entry that parses back to it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fuzz/fuzz_support.hpp"
#include "runtime/fault/fault_plan.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto plan = accord::parse_fault_list(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!plan) {
    const std::string& message = plan.error().message();
    if (accord::printable(message) != message) std::abort();
    accord::fuzz::consume(message);
    return 0;
  }
  accord::RankFaults rank(0, *plan);
  for (const accord::Fault& fault : *plan) {
    auto again = accord::parse_fault(accord::to_string(fault));
    if (!again || !(*again == fault)) std::abort();
    rank.on_phase({fault.phase, fault.route});
  }
  if (auto checked = accord::check_fault_plan(*plan, 3); !checked) accord::fuzz::consume(checked.error().message());
  return 0;
}
