// The command line with GGUF models: generate takes the vocabulary from the
// file, inspect reads both formats, convert writes GGUF files.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/reference.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

using test::run_accord;

std::string stories_gguf() { return (test::shared_dir() / "models" / "stories260K.gguf").string(); }

// Greedy JSON generation of every reference prompt; expects run.c's tokens.
void expect_reference_generation(const std::vector<std::string>& model_args) {
  for (const auto& c : test::greedy_cases()) {
    std::vector<std::string> args = {"generate"};
    args.insert(args.end(), model_args.begin(), model_args.end());
    args.insert(args.end(), {"--prompt", c.prompt, "--temperature", "0", "--max-tokens",
                             std::to_string(c.generated_tokens.size()), "--json"});
    const auto result = run_accord(args);
    ASSERT_EQ(result.exit_code, 0) << result.output;
    const auto json = nlohmann::json::parse(result.output);
    EXPECT_EQ(json.at("prompt_tokens").get<std::vector<int>>(), c.prompt_tokens) << c.prompt;
    EXPECT_EQ(json.at("generated_tokens").get<std::vector<int>>(), c.generated_tokens) << c.prompt;
    EXPECT_EQ(json.at("text").get<std::string>(), c.text) << c.prompt;
  }
}

// The identity line of `accord inspect`.
std::string identity(const std::string& model) {
  const auto result = run_accord({"inspect", model});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  const std::string label = "identity     ";
  const auto at = result.output.find(label);
  return at == std::string::npos ? "" : result.output.substr(at + label.size(), 32);
}

TEST(CliGguf, GenerateTakesTheTokenizerFromTheFile) {
  expect_reference_generation({"--model", stories_gguf()});
  const auto json = nlohmann::json::parse(
      run_accord({"generate", "--model", stories_gguf(), "--max-tokens", "3", "--temperature", "0", "--json"}).output);
  EXPECT_EQ(json.at("model_format"), "gguf-v3");
}

// --chat puts the prompt in the model's template (stories260K has none:
// plain) and prints the reply alone, which ends before the next "User:".
TEST(CliGguf, ChatRendersTheTemplateAndPrintsTheReplyAlone) {
  const std::vector<std::string> greedy = {"generate", "--model",      stories_gguf(), "--temperature",
                                           "0",        "--max-tokens", "40",           "--json"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = greedy;
    args.insert(args.end(), extra.begin(), extra.end());
    const auto result = run_accord(args);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    return nlohmann::json::parse(result.output);
  };
  const auto chat = with({"--chat", "--prompt", "Hi"});
  const auto plain = with({"--prompt", "User: Hi\nAssistant:"});
  EXPECT_EQ(chat.at("prompt_tokens"), plain.at("prompt_tokens"));
  const std::string reply = chat.at("reply"), text = plain.at("text");
  EXPECT_EQ(reply.find("\nUser:"), std::string::npos) << reply;
  EXPECT_NE(text.find("Assistant:" + reply), std::string::npos) << reply << " | " << text;
  const auto no_chat = run_accord({"generate", "--model", stories_gguf(), "--chat-template", "chatml"});
  EXPECT_EQ(no_chat.exit_code, 2) << no_chat.output;
  const auto unknown = run_accord({"generate", "--model", stories_gguf(), "--chat", "--chat-template", "nosuch"});
  EXPECT_EQ(unknown.exit_code, 1) << unknown.output;
  EXPECT_NE(unknown.output.find("'nosuch' is neither a built-in"), std::string::npos) << unknown.output;
}

TEST(CliGguf, InspectPrintsConfigurationTensorsAndIdentity) {
  const auto gguf = run_accord({"inspect", stories_gguf()});
  ASSERT_EQ(gguf.exit_code, 0) << gguf.output;
  for (const char* fragment : {"gguf-v3", "architecture llama", "seq_len      2048", "48 tensors",
                               "blk.4.ffn_down.weight", "172 x 64", "identity     ", "XXH3-128",
                               "tokenizer    SentencePiece (llama), 512 tokens, BOS added", "types        F32 x48"}) {
    EXPECT_NE(gguf.output.find(fragment), std::string::npos) << fragment << " in\n" << gguf.output;
  }
  const auto bin = run_accord({"inspect", test::stories_model()});
  ASSERT_EQ(bin.exit_code, 0) << bin.output;
  for (const char* fragment : {"llama2c-legacy", "seq_len      512", "13 tensors", "5 x 64 x 64", "freq_cis_real",
                               "identity", "tokenizer    none in the file"}) {
    EXPECT_NE(bin.output.find(fragment), std::string::npos) << fragment << " in\n" << bin.output;
  }
  const auto bad = run_accord({"inspect", "/nonexistent/model.gguf"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("cannot open"), std::string::npos) << bad.output;
}

TEST(CliGguf, ConvertsLlama2cToGgufAndQuantizes) {
  test::TempDir dir;
  const std::string f32 = dir.file("stories-f32.gguf"), f16 = dir.file("stories-f16.gguf");
  auto converted = run_accord({"convert", "--in", test::stories_model(), "--tokenizer", test::stories_tokenizer(),
                               "--out", f32, "--type", "f32"});
  ASSERT_EQ(converted.exit_code, 0) << converted.output;
  // Same configuration and weights: the same identity as the .bin file.
  EXPECT_EQ(identity(f32), identity(test::stories_model()));
  expect_reference_generation({"--model", f32});
  converted = run_accord({"convert", "--in", f32, "--out", f16, "--type", "f16"});
  ASSERT_EQ(converted.exit_code, 0) << converted.output;
  EXPECT_NE(identity(f16), identity(f32));
  expect_reference_generation({"--model", f16});
  const auto inspected = run_accord({"inspect", f16});
  EXPECT_NE(inspected.output.find("F16"), std::string::npos) << inspected.output;
}

TEST(CliGguf, ConvertRefusesBadRequests) {
  test::TempDir dir;
  auto result = run_accord({"convert", "--in", stories_gguf(), "--out", dir.file("x.gguf"), "--type", "q8_1"});
  EXPECT_EQ(result.exit_code, 2) << result.output;
  // stories260K's rows of 64 values hold no super-block of 256.
  result = run_accord({"convert", "--in", stories_gguf(), "--out", dir.file("x.gguf"), "--type", "q5_k"});
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("cannot write token_embd.weight as Q5_K: its rows of 64 values are not whole "
                               "super-blocks of 256"),
            std::string::npos)
      << result.output;
  result = run_accord(
      {"convert", "--in", stories_gguf(), "--out", dir.file("x.gguf"), "--tokenizer", test::stories_tokenizer()});
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("keeps its own vocabulary"), std::string::npos) << result.output;
  test::write_bytes(dir.file("alone.bin"), test::read_bytes(test::stories_model()));
  result = run_accord({"convert", "--in", dir.file("alone.bin"), "--out", dir.file("x.gguf")});
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("no tokenizer given"), std::string::npos) << result.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.gguf")));
  for (const char* command : {"inspect", "convert"}) {
    const auto help = run_accord({command, "--help"});
    EXPECT_EQ(help.exit_code, 0) << help.output;
    EXPECT_NE(help.output.find("Usage"), std::string::npos) << help.output;
  }
}

// llama-quantize's Q4_K_M mix: Q6_K for the embedding (the output too)
// and for the last layer's attn_v and ffn_down, Q4_K for the rest; the
// model runs.
TEST(CliGguf, ConvertsToTheQ4_K_MMix) {
  test::TempDir dir;
  const std::string bin = dir.file("wide.bin"), mixed = dir.file("wide-q4_k_m.gguf");
  auto result = run_accord({"synth", "--out", bin, "--dim", "256", "--hidden", "512", "--layers", "3", "--heads", "8",
                            "--kv-heads", "4", "--vocab", "320", "--seq", "64"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  result = run_accord({"convert", "--in", bin, "--out", mixed, "--type", "q4_k_m"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("(Q4_K_M)"), std::string::npos) << result.output;
  const auto inspected = run_accord({"inspect", mixed});
  for (const char* row : {"token_embd.weight            Q6_K", "blk.2.attn_v.weight          Q6_K",
                          "blk.2.ffn_down.weight        Q6_K", "blk.1.ffn_down.weight        Q4_K"}) {
    EXPECT_NE(inspected.output.find(row), std::string::npos) << row << " in\n" << inspected.output;
  }
  result = run_accord({"generate", "--model", mixed, "--max-tokens", "4", "--temperature", "0"});
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

// A GGUF file is one by its magic, whatever its name: named .bin it still
// brings its own vocabulary.
TEST(CliGguf, AGgufFileNamedBinIsReadAsGguf) {
  test::TempDir dir;
  test::write_bytes(dir.file("stories.bin"), test::read_bytes(stories_gguf()));
  expect_reference_generation({"--model", dir.file("stories.bin")});
  EXPECT_EQ(identity(dir.file("stories.bin")), identity(stories_gguf()));
}

// convert checks a llama2.c input's tokenizer against its header before
// reading the weights, and writes nothing.
TEST(CliGguf, ConvertRefusesAMismatchedTokenizerBeforeReadingTheWeights) {
  test::TempDir dir;
  const auto files = test::truncated_model_and_foreign_tokenizer(dir);
  const auto result =
      run_accord({"convert", "--in", files.model, "--tokenizer", files.tokenizer, "--out", dir.file("x.gguf")});
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("the tokenizer has 300 tokens but the model's vocabulary has 512"), std::string::npos)
      << result.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.gguf")));
}

TEST(CliGguf, RefusesDamagedGgufFiles) {
  test::TempDir dir;
  auto bytes = test::read_bytes(stories_gguf());
  bytes.resize(bytes.size() / 2);
  test::write_bytes(dir.file("half.gguf"), bytes);
  for (const char* command : {"generate", "inspect"}) {
    std::vector<std::string> args = {command};
    if (std::string(command) == "generate") args.push_back("--model");
    args.push_back(dir.file("half.gguf"));
    const auto result = run_accord(args);
    EXPECT_EQ(result.exit_code, 1) << result.output;
    EXPECT_NE(result.output.find("accord: error: " + dir.file("half.gguf") + ": tensor"), std::string::npos)
        << result.output;
    EXPECT_NE(result.output.find("lies outside the file"), std::string::npos) << result.output;
  }
  bytes.resize(100);
  test::write_bytes(dir.file("head.gguf"), bytes);
  const auto result = run_accord({"inspect", dir.file("head.gguf")});
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("remain"), std::string::npos) << result.output;
}

TEST(CliGguf, GenerateAcceptsAGgufVocabularyAsTokenizer) {
  // The stories GGUF's vocabulary drives the llama2.c model.
  expect_reference_generation({"--model", test::stories_model(), "--tokenizer", stories_gguf()});
}

}  // namespace
}  // namespace accord
