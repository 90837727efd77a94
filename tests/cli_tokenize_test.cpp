// `accord tokenize`: ids and pieces as llama-tokenize gives them, on the
// vocabularies of ../shared/vocab and llama.cpp's vectors for them.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/support.hpp"

namespace accord {
namespace {

using test::run_accord;

std::string vocab(const std::string& name) {
  return (test::shared_dir() / "vocab" / ("ggml-vocab-" + name + ".gguf")).string();
}

// The ids llama.cpp's test vectors give `text` (it must be one of them).
std::vector<int> vector_ids(const std::string& name, const std::string& text) {
  std::ifstream inp(vocab(name) + ".inp", std::ios::binary);
  std::ifstream out(vocab(name) + ".out", std::ios::binary);
  std::stringstream inputs;
  inputs << inp.rdbuf();
  const std::string all = inputs.str();
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::string line;
  for (std::size_t at = 0, next; (next = all.find(separator, at)) != std::string::npos; at = next + separator.size()) {
    std::getline(out, line);
    if (all.substr(at, next - at) != text) continue;
    std::istringstream ids(line);
    std::vector<int> parsed;
    for (int id; ids >> id;) parsed.push_back(id);
    return parsed;
  }
  ADD_FAILURE() << "no vector '" << text << "'";
  return {};
}

// Llama 3's file adds BOS; <|eot_id|> written in the text is its token.
TEST(CliTokenize, JsonGivesIdsAndPiecesWithBosAndSpecials) {
  const auto result =
      run_accord({"tokenize", "--model", vocab("llama-bpe"), "--text", "Hello, world!<|eot_id|>", "--json"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto json = nlohmann::json::parse(result.output);
  std::vector<int> expected = {128000};  // <|begin_of_text|>, the file's BOS
  for (int id : vector_ids("llama-bpe", "Hello, world!")) expected.push_back(id);
  expected.push_back(128009);  // <|eot_id|>
  EXPECT_EQ(json.at("ids").get<std::vector<int>>(), expected);
  const auto pieces = json.at("pieces").get<std::vector<std::string>>();
  ASSERT_EQ(pieces.size(), expected.size());
  EXPECT_EQ(pieces.front(), "<|begin_of_text|>");
  std::string text;
  for (std::size_t i = 1; i + 1 < pieces.size(); ++i) text += pieces[i];
  EXPECT_EQ(text, "Hello, world!");
  EXPECT_EQ(pieces.back(), "<|eot_id|>");
}

// Qwen2's file adds no BOS; the default output is llama-tokenize's.
TEST(CliTokenize, PrintsOneTokenALine) {
  const auto result = run_accord({"tokenize", "--model", vocab("qwen2"), "--text", " Hello"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const std::vector<int> ids = vector_ids("qwen2", " Hello");
  ASSERT_EQ(ids.size(), 1u);
  char line[64];
  std::snprintf(line, sizeof line, "%6d -> ' Hello'\n", ids[0]);
  EXPECT_EQ(result.output, line);
}

TEST(CliTokenize, RefusesWhatIsNoVocabulary) {
  const auto missing = run_accord({"tokenize", "--model", "/nonexistent.gguf", "--text", "x"});
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_NE(missing.output.find("accord: error:"), std::string::npos) << missing.output;
  const auto help = run_accord({"tokenize", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("--json"), std::string::npos);
}

}  // namespace
}  // namespace accord
