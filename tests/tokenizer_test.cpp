#include "runtime/text/tokenizer.hpp"

#include <gtest/gtest.h>

#include "runtime/model/synthetic.hpp"
#include "runtime/text/synthetic_tokenizer.hpp"
#include "tests/reference.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

using test::TempDir;

TEST(Tokenizer, LoadsTok512) {
  const Tokenizer t = test::load_stories_tokenizer();
  EXPECT_EQ(t.vocab_size(), 512);
  EXPECT_EQ(t.piece(1), "\n<s>\n");
  EXPECT_EQ(t.piece(3), "<0x00>");
}

TEST(Tokenizer, EncodesReferencePromptsLikeRunC) {
  const Tokenizer t = test::load_stories_tokenizer();
  const auto cases = test::greedy_cases();
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    auto tokens = t.encode(c.prompt, true, false);
    ASSERT_TRUE(tokens) << tokens.error().message();
    EXPECT_EQ(*tokens, c.prompt_tokens) << "prompt '" << c.prompt << "'";
  }
}

TEST(Tokenizer, EmptyTextGetsNoDummyPrefix) {
  const Tokenizer t = test::load_stories_tokenizer();
  EXPECT_EQ(*t.encode("", true, true), (std::vector<int>{1, 2}));
  EXPECT_TRUE(t.encode("", false, false)->empty());
}

TEST(Tokenizer, UnknownCodePointsFallBackToBytes) {
  const Tokenizer t = test::load_stories_tokenizer();
  // U+4E2D is not a piece of tok512: its UTF-8 bytes become <0xE4> <0xB8> <0xAD>.
  auto tokens = t.encode("\xE4\xB8\xAD", false, false);
  ASSERT_TRUE(tokens);
  ASSERT_EQ(tokens->size(), 4u);  // dummy prefix, then three bytes
  EXPECT_EQ(t.piece(tokens->at(1)), "<0xE4>");
  EXPECT_EQ(t.piece(tokens->at(2)), "<0xB8>");
  EXPECT_EQ(t.piece(tokens->at(3)), "<0xAD>");
}

TEST(Tokenizer, DecodeFollowsRunC) {
  const Tokenizer t = test::load_stories_tokenizer();
  const int once = 403;                  // " Once"
  EXPECT_EQ(t.decode(1, once), "Once");  // leading space dropped after BOS
  EXPECT_EQ(t.decode(once, once), " Once");
  EXPECT_EQ(t.decode(once, 3 + 'A'), "A");  // <0x41>
  EXPECT_EQ(t.decode(once, 3 + '\n'), "\n");
  EXPECT_EQ(t.decode(once, 3 + 0x01), "");  // control byte: not printed
  EXPECT_EQ(t.decode(once, 3 + 0xC3), "");  // lone high byte: not printed, as safe_printf does
}

TEST(Tokenizer, RoundTripsThroughTheFileFormat) {
  TempDir dir;
  auto synthetic = synthetic_tokenizer(600);
  ASSERT_TRUE(synthetic);
  ASSERT_TRUE(synthetic->write_llama2c(dir.file("t.bin")));
  auto loaded = Tokenizer::load_llama2c(dir.file("t.bin"));
  ASSERT_TRUE(loaded) << loaded.error().message();
  ASSERT_EQ(loaded->vocab_size(), 600);
  for (int id = 0; id < 600; ++id) {
    EXPECT_EQ(loaded->piece(id), synthetic->piece(id));
    EXPECT_EQ(loaded->score(id), synthetic->score(id));
  }
  const std::string text = "Hello, world! Merges make longer pieces.";
  auto tokens = loaded->encode(text, true, false);
  ASSERT_TRUE(tokens);
  EXPECT_LT(tokens->size(), text.size());  // some merges happened
  std::string decoded;
  for (std::size_t i = 1; i < tokens->size(); ++i) decoded += loaded->decode((*tokens)[i - 1], (*tokens)[i]);
  EXPECT_EQ(decoded, text);
}

TEST(Tokenizer, SyntheticNeedsRoomForByteFallback) {
  auto t = synthetic_tokenizer(kMinSyntheticVocab - 1);
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code(), ErrorCode::contract);
}

TEST(Tokenizer, RefusesMalformedFiles) {
  TempDir dir;
  const auto good = test::read_bytes(test::stories_tokenizer());
  struct Case {
    const char* name;
    std::vector<std::byte> bytes;
    const char* message;
  };
  auto truncated = good;
  truncated.resize(good.size() - 3);
  auto bad_length = good;
  bad_length[4 + 4] = std::byte{0xFF};  // first token's length becomes huge
  bad_length[4 + 7] = std::byte{0x7F};
  const Case cases[] = {
      {"empty", {}, "shorter than its 4-byte header"},
      {"truncated", truncated, "length"},
      {"bad_length", bad_length, "has length"},
      {"zero_max", std::vector<std::byte>(4, std::byte{0}), "max token length 0"},
  };
  for (const auto& c : cases) {
    test::write_bytes(dir.file(c.name), c.bytes);
    auto t = Tokenizer::load_llama2c(dir.file(c.name));
    ASSERT_FALSE(t) << c.name;
    EXPECT_EQ(t.error().code(), ErrorCode::format) << c.name;
    EXPECT_NE(t.error().message().find(c.message), std::string::npos) << c.name << ": " << t.error().message();
  }
  auto missing = Tokenizer::load_llama2c(dir.file("absent"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), ErrorCode::io);
}

}  // namespace
}  // namespace accord
