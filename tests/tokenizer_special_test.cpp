// Special tokens, BOS/EOS use and the tokens that end generation, as
// llama.cpp's vocabulary load and tokenizer_st_partition make them, on the
// vocabularies of ../shared/vocab.
#include <gtest/gtest.h>

#include <algorithm>

#include "runtime/text/tokenizer.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

using test::id_of;
using test::load_vocab;

std::vector<int> encode(const Tokenizer& tokenizer, const std::string& text, bool parse_special) {
  auto ids = tokenizer.encode(text, EncodeOptions{.parse_special = parse_special});
  EXPECT_TRUE(ids) << ids.error().message();
  return ids ? *ids : std::vector<int>{};
}

std::vector<int> join(std::initializer_list<std::vector<int>> parts) {
  std::vector<int> all;
  for (const auto& part : parts) all.insert(all.end(), part.begin(), part.end());
  return all;
}

// Control tokens written in the text are cut out only when parsing
// specials; the text between them encodes as it does alone.
TEST(TokenizerSpecial, ControlTokensAreCutWhenParsingSpecials) {
  const Tokenizer qwen = load_vocab("qwen2");
  const int start = id_of(qwen, "<|im_start|>");
  const int end = id_of(qwen, "<|im_end|>");
  const std::string text = "<|im_start|>user\nHello!<|im_end|>";
  EXPECT_EQ(encode(qwen, text, true), join({{start}, encode(qwen, "user\nHello!", false), {end}}));
  const std::vector<int> literal = encode(qwen, text, false);
  EXPECT_EQ(std::count(literal.begin(), literal.end(), start), 0);
  EXPECT_EQ(std::count(literal.begin(), literal.end(), end), 0);
}

// User-defined tokens are cut out either way (llama.cpp, after Hugging
// Face's tokenizers).
TEST(TokenizerSpecial, UserDefinedTokensAreAlwaysCut) {
  const Tokenizer coder = load_vocab("deepseek-coder");
  const int user = id_of(coder, "<|User|>");
  EXPECT_EQ(coder.attributes(user) & kTokenUserDefined, kTokenUserDefined);
  EXPECT_EQ(encode(coder, "hi<|User|>there", false),
            join({encode(coder, "hi", false), {user}, encode(coder, "there", false)}));
}

// SentencePiece puts its dummy-prefix space before text that follows a
// special token, as before the start of the input.
TEST(TokenizerSpecial, SentencePieceTextAfterASpecialTokenGetsTheDummyPrefix) {
  const Tokenizer llama = load_vocab("llama-spm");
  EXPECT_EQ(encode(llama, "Hello</s>world", true),
            join({encode(llama, "Hello", false), {llama.eos_id()}, encode(llama, "world", false)}));
}

// Phi-3's special tokens swallow the whitespace after them (llama.cpp's
// rule for models named phi3), except <s>, <unk> and <|endoftext|>.
TEST(TokenizerSpecial, Phi3SpecialTokensDropTheWhitespaceAfterThem) {
  const Tokenizer phi = load_vocab("phi-3");
  const int user = id_of(phi, "<|user|>");
  EXPECT_EQ(encode(phi, "<|user|> \n Hi", true), join({{user}, encode(phi, "Hi", false)}));
  const int text_end = id_of(phi, "<|endoftext|>");
  EXPECT_EQ(encode(phi, "<|endoftext|> Hi", true), join({{text_end}, encode(phi, " Hi", false)}));
}

// BOS is added as each file (or llama.cpp's default for its kind) says.
TEST(TokenizerSpecial, AddBosComesFromTheFile) {
  for (const char* name : {"llama-spm", "phi-3", "baichuan", "llama-bpe", "deepseek-llm", "command-r", "gemma-4"}) {
    EXPECT_TRUE(load_vocab(name).add_bos()) << name;
  }
  for (const char* name : {"gpt-2", "qwen2", "falcon", "mpt", "starcoder"}) {
    EXPECT_FALSE(load_vocab(name).add_bos()) << name;
  }
  EXPECT_FALSE(load_vocab("llama-bpe").add_eos());
}

bool ends_generation(const Tokenizer& tokenizer, const std::string& piece) {
  const auto& ends = tokenizer.end_of_generation();
  return std::binary_search(ends.begin(), ends.end(), id_of(tokenizer, piece));
}

// The chat models' end-of-turn tokens end generation besides EOS.
TEST(TokenizerSpecial, EndOfTurnTokensEndGeneration) {
  const Tokenizer llama3 = load_vocab("llama-bpe");
  EXPECT_TRUE(ends_generation(llama3, "<|eot_id|>"));
  EXPECT_TRUE(ends_generation(llama3, "<|end_of_text|>"));
  EXPECT_FALSE(ends_generation(llama3, "<|begin_of_text|>"));
  const Tokenizer qwen = load_vocab("qwen2");
  EXPECT_TRUE(ends_generation(qwen, "<|im_end|>"));
  EXPECT_TRUE(ends_generation(qwen, "<|endoftext|>"));
  EXPECT_FALSE(ends_generation(qwen, "<|im_start|>"));
  const Tokenizer phi = load_vocab("phi-3");
  EXPECT_TRUE(ends_generation(phi, "<|end|>"));
  EXPECT_TRUE(ends_generation(phi, "<|endoftext|>"));
  const Tokenizer gemma = load_vocab("gemma-4");
  EXPECT_TRUE(ends_generation(gemma, "<turn|>"));
  EXPECT_TRUE(ends_generation(gemma, "<eos>"));
  EXPECT_FALSE(ends_generation(gemma, "</s>"));  // an ordinary token there
  const Tokenizer stories = test::load_stories_tokenizer();
  EXPECT_EQ(stories.end_of_generation(), std::vector<int>{stories.eos_id()});
}

// A vocabulary of `model` / `pre` written from gpt-2's.
std::string rewritten_vocab(const test::TempDir& dir, const std::string& model, const std::string& pre) {
  gguf::Metadata metadata = load_vocab("gpt-2").gguf_metadata();
  for (auto& [key, value] : metadata) {
    if (key == "tokenizer.ggml.model") value = gguf::Value::string(model);
    if (key == "tokenizer.ggml.pre") value = gguf::Value::string(pre);
  }
  const std::string path = dir.file(model + "-" + pre + ".gguf");
  EXPECT_TRUE(gguf::write(path, metadata, {}));
  return path;
}

TEST(TokenizerSpecial, UnknownPreTokenizersAndModelsAreRefusedByName) {
  test::TempDir dir;
  auto pre = Tokenizer::load(rewritten_vocab(dir, "gpt2", "nonesuch-bpe"));
  ASSERT_FALSE(pre);
  EXPECT_EQ(pre.error().code(), ErrorCode::architecture);
  EXPECT_NE(pre.error().message().find("'nonesuch-bpe' (tokenizer.ggml.pre)"), std::string::npos)
      << pre.error().message();
  auto model = Tokenizer::load(rewritten_vocab(dir, "bert", "gpt-2"));
  ASSERT_FALSE(model);
  EXPECT_NE(model.error().message().find("'bert' (tokenizer.ggml.model)"), std::string::npos)
      << model.error().message();
}

}  // namespace
}  // namespace accord
