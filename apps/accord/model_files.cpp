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

bool is_gguf(const Model& model) { return model.format().rfind("gguf", 0) == 0; }

Result<Tokenizer> find_tokenizer(const std::string& explicit_path, const Model& model) {
  if (!explicit_path.empty()) return Tokenizer::load(explicit_path);
  if (is_gguf(model)) return Tokenizer::load(model.path());
  const auto candidates = tokenizer_candidates(model.path(), model.config().vocab_size);
  for (const auto& path : candidates) {
    if (std::filesystem::is_regular_file(path)) return Tokenizer::load_llama2c(path);
  }
  std::string tried;
  for (const auto& path : candidates) tried += "\n  " + path;
  return Error(ErrorCode::io, "no tokenizer given and none found beside the model; pass --tokenizer. Looked for:" +
                                  tried);
}

}  // namespace accord::cli
