#include "apps/accord/model_files.hpp"

#include <filesystem>

namespace accord::cli {

namespace {

// The tokenizer of find_tokenizer(), not yet checked against the model.
Result<Tokenizer> locate_tokenizer(const std::string& explicit_path, const std::string& model_path,
                                   const ModelHeader& header) {
  if (!explicit_path.empty()) return Tokenizer::load(explicit_path);
  if (is_gguf(header.format)) return Tokenizer::load(model_path);
  const auto candidates = tokenizer_candidates(model_path, header.config.vocab_size);
  for (const auto& path : candidates) {
    if (std::filesystem::is_regular_file(path)) return Tokenizer::load_llama2c(path);
  }
  std::string tried;
  for (const auto& path : candidates) tried += "\n  " + path;
  return Error(ErrorCode::io,
               "no tokenizer given and none found beside the model; pass --tokenizer. Looked for:" + tried);
}

}  // namespace

std::string companion_tokenizer_path(const std::string& model_path) {
  std::filesystem::path path(model_path);
  return (path.parent_path() / (path.stem().string() + ".tokenizer.bin")).string();
}

std::vector<std::string> tokenizer_candidates(const std::string& model_path, int vocab_size) {
  const std::filesystem::path dir = std::filesystem::path(model_path).parent_path();
  return {companion_tokenizer_path(model_path), (dir / "tokenizer.bin").string(),
          (dir / ("tok" + std::to_string(vocab_size) + ".bin")).string()};
}

bool is_gguf(std::string_view format) { return format.starts_with("gguf"); }

const std::map<std::string, gguf::TensorType>& matrix_types() {
  static const std::map<std::string, gguf::TensorType> types = {
      {"f32", gguf::TensorType::f32},   {"f16", gguf::TensorType::f16},       {"q8_0", gguf::TensorType::q8_0},
      {"q4_0", gguf::TensorType::q4_0}, {"bf16", gguf::TensorType::bf16},     {"q2_k", gguf::TensorType::q2_k},
      {"q3_k", gguf::TensorType::q3_k}, {"q4_k", gguf::TensorType::q4_k},     {"q5_k", gguf::TensorType::q5_k},
      {"q6_k", gguf::TensorType::q6_k}, {"iq4_xs", gguf::TensorType::iq4_xs}, {"q4_1", gguf::TensorType::q4_1},
      {"q5_0", gguf::TensorType::q5_0}, {"q5_1", gguf::TensorType::q5_1},     {"iq4_nl", gguf::TensorType::iq4_nl}};
  return types;
}

std::vector<std::string> matrix_type_names() {
  std::vector<std::string> names;
  for (const auto& [name, type] : matrix_types()) names.push_back(name);
  return names;
}

Result<Tokenizer> find_tokenizer(const std::string& explicit_path, const std::string& model_path,
                                 const ModelHeader& header) {
  auto tokenizer = locate_tokenizer(explicit_path, model_path, header);
  if (!tokenizer) return tokenizer.error();
  if (Status fits = tokenizer->check_fits(header.config.vocab_size); !fits) {
    return Error(fits.error().code(), "the tokenizer does not fit " + model_path + ": " + fits.error().message());
  }
  return tokenizer;
}

}  // namespace accord::cli
