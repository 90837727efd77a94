// libFuzzer target: the llama2.c checkpoint reader.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz/fuzz_support.hpp"
#include "runtime/model/llama2c.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // libFuzzer's buffer comes from malloc, so floats in it are aligned.
  if (auto model = accord::llama2c::read(std::as_bytes(std::span(data, size)), "fuzz.bin")) {
    accord::fuzz::touch_weights(*model);
  }
  return 0;
}
