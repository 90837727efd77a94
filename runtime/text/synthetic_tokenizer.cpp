#include "runtime/text/synthetic_tokenizer.hpp"

#include <cstdio>
#include <string>
#include <unordered_set>
#include <vector>

namespace accord {

Result<Tokenizer> synthetic_tokenizer(int vocab_size) {
  if (vocab_size < kMinSyntheticVocab) {
    return Error(ErrorCode::contract, "a synthetic tokenizer needs a vocabulary of at least " +
                                          std::to_string(kMinSyntheticVocab) + " tokens, got " +
                                          std::to_string(vocab_size));
  }
  const auto size = static_cast<std::size_t>(vocab_size);
  std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  std::vector<float> scores(3, 0.0f);
  for (int byte = 0; byte < 256; ++byte) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", byte);
    pieces.emplace_back(name);
    scores.push_back(0.0f);
  }
  std::unordered_set<std::string> seen;
  auto add = [&](std::string piece) {
    if (pieces.size() < size && seen.insert(piece).second) {
      scores.push_back(-static_cast<float>(pieces.size()));
      pieces.push_back(std::move(piece));
    }
  };
  for (char c = ' '; c <= '~'; ++c) add(std::string(1, c));
  // Concatenations of earlier pieces with one character, shortest first, so
  // every piece is reachable by merging two others; earlier pieces score
  // higher.
  const std::size_t alphabet_end = pieces.size();
  for (std::size_t round_end = pieces.size(); pieces.size() < size;) {
    for (std::size_t a = 3 + 256; a < round_end && pieces.size() < size; ++a) {
      for (std::size_t b = 3 + 256; b < alphabet_end && pieces.size() < size; ++b) add(pieces[a] + pieces[b]);
    }
    round_end = pieces.size();
  }
  return Tokenizer::from_pieces(std::move(pieces), std::move(scores));
}

}  // namespace accord
