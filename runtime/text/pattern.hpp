// The regular expressions of BPE pre-tokenizers (llama.cpp's per
// `tokenizer.ggml.pre` lists), matched over a text's code points.
//
// The dialect is the subset those lists use, with std::regex's ECMAScript
// meaning as llama.cpp runs it: alternation is ordered (the first
// alternative that matches wins), quantifiers `? * + {n} {n,m}` are greedy,
// `(?:..)` and `(..)` group, `(?=..)` / `(?!..)` look ahead, `$` is the end
// of the span searched, classes `[..]` take ranges of code points and the
// escapes `\s \S \d \r \n \t \uHHHH \p{L} \p{N} \p{P} \p{M} \p{S}` (the letter
// subclasses `\p{Lu}` ... mean every letter, as in llama.cpp's collapsed
// matching). `\s` is Unicode's White_Space, and a non-ASCII space compares
// as U+000B against literal code points, as in llama.cpp.
//
// Matching is RE2's "bit state" backtracking: a (instruction, position)
// pair visited once is never tried again, so splitting n code points
// costs O(n * pattern size) steps (never exponential or quadratic) and as
// many bits of memory while it runs.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/base/error.hpp"

namespace accord::unicode {

// A code point as the matcher sees it: the value compared with literals
// and its character classes (CharClass bits).
struct MatchChar {
  std::uint32_t value;
  std::uint8_t classes;
};

enum CharClass : std::uint8_t {
  kWhitespace = 1,
  kLetter = 2,
  kNumber = 4,
  kPunctuation = 8,
  kMark = 16,
  kSymbol = 32,
};

// The MatchChar of a code point (0xFFFD stands for invalid bytes).
MatchChar match_char(std::uint32_t code_point);

class Pattern {
 public:
  // Parses `expression` (UTF-8); a format error names what is unsupported.
  static Result<Pattern> compile(std::string_view expression);

  // Splits text[begin, end) the way llama.cpp's regex split does: every
  // match is one piece, and the text between matches is one piece too.
  // Appends the pieces' lengths (in code points) to `lengths`; `steps`
  // counts the matcher's work.
  void split(std::span<const MatchChar> text, std::vector<std::size_t>& lengths, std::uint64_t& steps) const;

  struct Instruction;
  struct Set;

 private:
  Pattern() = default;
  // The end of the leftmost match at `from` or later, or -1; sets `start`.
  std::int64_t search(std::span<const MatchChar> text, std::size_t from, std::size_t& start,
                      std::vector<std::uint64_t>& visited, std::uint64_t& steps) const;
  // `depth`: 0 for the search, one more for each lookahead inside.
  bool match_here(std::span<const MatchChar> text, int pc, std::size_t pos, std::vector<std::uint64_t>* visited,
                  std::int64_t& end, std::uint64_t& steps, std::size_t depth) const;

  std::shared_ptr<const std::vector<Instruction>> program_;
  std::shared_ptr<const std::vector<Set>> sets_;
};

}  // namespace accord::unicode
