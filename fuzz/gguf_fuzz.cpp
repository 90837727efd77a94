// libFuzzer target: the GGUF reader, the llama model built from it and the
// GGUF vocabulary. Any input must give a value or a clear error.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz/fuzz_support.hpp"
#include "runtime/model/gguf.hpp"
#include "runtime/model/gguf_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  auto file = accord::gguf::parse(bytes, "fuzz.gguf");
  if (!file) return 0;
  for (const auto& [key, value] : file->metadata) accord::fuzz::consume(value.describe());
  if (auto model = accord::read_gguf_model(*file, bytes, "fuzz.gguf")) accord::fuzz::touch_weights(*model);
  if (auto tokenizer = accord::Tokenizer::from_gguf(*file, "fuzz.gguf")) accord::fuzz::exercise(*tokenizer);
  return 0;
}
