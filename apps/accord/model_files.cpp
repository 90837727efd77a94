#include "apps/accord/model_files.hpp"

#include <filesystem>

namespace accord::cli {

std::string companion_tokenizer_path(const std::string& model_path) {
  std::filesystem::path path(model_path);
  return (path.parent_path() / (path.stem().string() + ".tokenizer.bin")).string();
}

std::vector<std::string> tokenizer_candidates(const std::string& model_path, int vocab_size) {
  const std::filesystem::path dir = std::filesystem::path(model_path).parent_path();
  return {companion_tokenizer_path(model_path), (dir / "tokenizer.bin").string(),
          (dir / ("tok" + std::to_string(vocab_size) + ".bin")).string()};
}

}  // namespace accord::cli
