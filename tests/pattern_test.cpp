// The pre-tokenizer patterns' matcher: std::regex's ECMAScript meaning as
// llama.cpp uses it, in linear time.
#include "runtime/text/pattern.hpp"

#include <gtest/gtest.h>

#include "runtime/base/utf8.hpp"

namespace accord::unicode {
namespace {

// The lengths (in code points) of the pieces `expression` splits `text` into.
std::vector<std::size_t> split(std::string_view expression, std::string_view text, std::uint64_t* steps = nullptr) {
  auto pattern = Pattern::compile(expression);
  EXPECT_TRUE(pattern) << pattern.error().message();
  std::vector<MatchChar> chars;
  for (std::size_t at = 0; at < text.size();) {
    const CodePoint cp = decode_utf8(text, at);
    chars.push_back(match_char(cp.value));
    at += cp.length;
  }
  std::vector<std::size_t> lengths;
  std::uint64_t counted = 0;
  if (pattern) pattern->split(chars, lengths, counted);
  if (steps != nullptr) *steps = counted;
  return lengths;
}

using Lengths = std::vector<std::size_t>;

TEST(Pattern, TheFirstAlternativeThatMatchesWins) {
  EXPECT_EQ(split("a|ab", "ab"), (Lengths{1, 1}));
  EXPECT_EQ(split("ab|a", "ab"), (Lengths{2}));
}

TEST(Pattern, GreedyLoopsGiveBackForWhatFollows) {
  // `\s+(?!\S)` leaves the last space before a word; a lone space before a
  // word is no match, so it joins the text up to the next match.
  EXPECT_EQ(split(R"(\s+(?!\S))", "   x"), (Lengths{2, 2}));
  EXPECT_EQ(split(R"(\s*[\r\n]+)", "  \n \n  x"), (Lengths{5, 3}));
  EXPECT_EQ(split(R"(\s+$)", "a  "), (Lengths{1, 2}));
  EXPECT_EQ(split(R"(\p{N}{1,3})", "1234567"), (Lengths{3, 3, 1}));
}

TEST(Pattern, LookaheadsNest) {
  EXPECT_EQ(split("a(?=b(?!c))", "abd abc"), (Lengths{1, 6}));
  EXPECT_EQ(split(R"((?=(\d{3})+(?!\d))\d{3})", "1234567"), (Lengths{1, 3, 3}));
}

TEST(Pattern, ClassesAreUnicodeCategories) {
  EXPECT_EQ(split(R"(\p{L}+)", "héllo wörld"), (Lengths{5, 1, 5}));
  EXPECT_EQ(split(R"([^\s\p{L}\p{N}]+)", "a+-b 9.,"), (Lengths{1, 2, 3, 2}));
  EXPECT_EQ(split(R"(\p{P}+)", "$a!?"), (Lengths{2, 2}));  // '$' is a symbol
  EXPECT_EQ(split(R"([\u00E9]+)", "aéé"), (Lengths{1, 2}));
}

// llama.cpp matches literals against a text whose non-ASCII spaces read as
// U+000B: a range that holds U+3000 does not match it, while \s does.
TEST(Pattern, NonAsciiSpacesMatchOnlyAsSpace) {
  EXPECT_EQ(split("[\u3000-\u3002]", "a\u3000b"), (Lengths{3}));
  EXPECT_EQ(split(R"(\s)", "a\u3000b"), (Lengths{1, 1, 1}));
}

TEST(Pattern, UnsupportedSyntaxIsAFormatError) {
  for (const char* expression : {"(?i:a)", "a+?", "[ab", "a)", "\\q", "\\p{Han}", "x{2"}) {
    auto pattern = Pattern::compile(expression);
    ASSERT_FALSE(pattern) << expression;
    EXPECT_EQ(pattern.error().code(), ErrorCode::format);
  }
}

// A run of spaces that `\s+$` must give back at every start costs linear
// work, not quadratic: twice the spaces, about twice the steps.
TEST(Pattern, BacktrackingCostsLinearWork) {
  std::uint64_t half = 0;
  std::uint64_t whole = 0;
  split(R"(\s+$|\s*[\r\n]+)", std::string(4000, ' ') + "x", &half);
  split(R"(\s+$|\s*[\r\n]+)", std::string(8000, ' ') + "x", &whole);
  EXPECT_GT(half, 4000u);
  EXPECT_LE(static_cast<double>(whole) / static_cast<double>(half), 2.2);
}

}  // namespace
}  // namespace accord::unicode
