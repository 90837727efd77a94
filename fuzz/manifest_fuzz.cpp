// libFuzzer target: the prompt-cache manifest reader (manifest.json of a
// cache generation, docs/prompt-cache.md). Any input gives a manifest or a
// clear error, and a manifest read writes as JSON that reads back the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz/fuzz_support.hpp"
#include "runtime/rank/prompt_cache.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto manifest = accord::manifest_from_json(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!manifest) {
    accord::fuzz::consume(manifest.error().message());
    return 0;
  }
  const std::string json = accord::manifest_to_json(*manifest);
  auto again = accord::manifest_from_json(json);
  if (!again || accord::manifest_to_json(*again) != json) std::abort();
  return 0;
}
