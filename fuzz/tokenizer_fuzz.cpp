// libFuzzer target: the tokenizer loader (llama2.c tokenizer.bin, or a
// GGUF vocabulary when the input starts with the GGUF magic), then encoding
// and decoding with whatever vocabulary loaded.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz/fuzz_support.hpp"
#include "runtime/model/gguf.hpp"

namespace {

accord::Result<accord::Tokenizer> load(std::span<const std::byte> bytes) {
  if (!accord::gguf::has_magic(bytes)) return accord::Tokenizer::read_llama2c(bytes, "fuzz.bin");
  auto file = accord::gguf::parse(bytes, "fuzz.gguf");
  if (!file) return file.error();
  return accord::Tokenizer::from_gguf(*file, "fuzz.gguf");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (auto tokenizer = load(std::as_bytes(std::span(data, size)))) accord::fuzz::exercise(*tokenizer);
  return 0;
}
