// llama.cpp's tokenizer test vectors (../shared/vocab, from
// llama-cpp-python 0.3.36): every string of ggml-vocab-NAME.gguf.inp must
// encode to the ids of its .out line, as llama.cpp's test-tokenizer-0
// tokenizes (add_special = false: no BOS/EOS; parse_special = false).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>
#include <unordered_map>

#include "runtime/text/tokenizer.hpp"
#include "tests/support.hpp"

namespace accord {
namespace {

struct Vector {
  std::string text;
  std::vector<int> ids;
};

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::filesystem::path vocab_path(const std::string& name) {
  return test::shared_dir() / "vocab" / ("ggml-vocab-" + name + ".gguf");
}

// The .inp strings are separated by the separator line (the last may end
// the file without one, as test-tokenizer-0 reads them); the .out lines
// hold the ids of one string each.
std::vector<Vector> read_vectors(const std::string& name) {
  const std::string inputs = read_text(vocab_path(name).string() + ".inp");
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<Vector> vectors;
  for (std::size_t at = 0; at < inputs.size();) {
    const std::size_t next = std::min(inputs.find(separator, at), inputs.size());
    vectors.push_back({inputs.substr(at, next - at), {}});
    at = next + separator.size();
  }
  std::istringstream outputs(read_text(vocab_path(name).string() + ".out"));
  std::string line;
  std::size_t lines = 0;
  for (; std::getline(outputs, line); ++lines) {
    if (lines >= vectors.size()) continue;
    std::istringstream ids(line);
    for (int id; ids >> id;) vectors[lines].ids.push_back(id);
  }
  EXPECT_EQ(lines, vectors.size()) << name << ": .out lines for .inp strings";
  return vectors;
}

Tokenizer load_vocab(const std::string& name) {
  auto t = Tokenizer::load(vocab_path(name).string());
  if (!t) {
    ADD_FAILURE() << t.error().message();
    std::abort();
  }
  return std::move(*t);
}

void expect_all_vectors_pass(const std::string& name, TokenizerKind kind, const std::string& pre) {
  const Tokenizer tokenizer = load_vocab(name);
  EXPECT_EQ(tokenizer.kind(), kind);
  EXPECT_EQ(tokenizer.pre_tokenizer(), pre);
  const auto vectors = read_vectors(name);
  ASSERT_EQ(vectors.size(), 46u);
  for (const auto& v : vectors) {
    auto ids = tokenizer.encode(v.text, false, false);
    ASSERT_TRUE(ids) << ids.error().message();
    EXPECT_EQ(*ids, v.ids) << name << ": '" << v.text << "'";
  }
}

TEST(TokenizerVectors, LlamaSentencePiece) { expect_all_vectors_pass("llama-spm", TokenizerKind::sentencepiece, ""); }
TEST(TokenizerVectors, Phi3SentencePiece) { expect_all_vectors_pass("phi-3", TokenizerKind::sentencepiece, ""); }
TEST(TokenizerVectors, Gpt2) { expect_all_vectors_pass("gpt-2", TokenizerKind::byte_bpe, "gpt-2"); }
TEST(TokenizerVectors, Llama3) { expect_all_vectors_pass("llama-bpe", TokenizerKind::byte_bpe, "llama-bpe"); }
TEST(TokenizerVectors, Qwen2) { expect_all_vectors_pass("qwen2", TokenizerKind::byte_bpe, "qwen2"); }
TEST(TokenizerVectors, DeepseekLlm) {
  expect_all_vectors_pass("deepseek-llm", TokenizerKind::byte_bpe, "deepseek-llm");
}
TEST(TokenizerVectors, DeepseekCoder) {
  expect_all_vectors_pass("deepseek-coder", TokenizerKind::byte_bpe, "deepseek-coder");
}
TEST(TokenizerVectors, Falcon) { expect_all_vectors_pass("falcon", TokenizerKind::byte_bpe, "falcon"); }
TEST(TokenizerVectors, Starcoder) { expect_all_vectors_pass("starcoder", TokenizerKind::byte_bpe, "starcoder"); }
TEST(TokenizerVectors, Refact) { expect_all_vectors_pass("refact", TokenizerKind::byte_bpe, "refact"); }
TEST(TokenizerVectors, Mpt) { expect_all_vectors_pass("mpt", TokenizerKind::byte_bpe, "mpt"); }
TEST(TokenizerVectors, CommandR) { expect_all_vectors_pass("command-r", TokenizerKind::byte_bpe, "command-r"); }
TEST(TokenizerVectors, Gemma4) { expect_all_vectors_pass("gemma-4", TokenizerKind::piece_bpe, "gemma4"); }

const char* const kBpeVocabularies[] = {"gpt-2",     "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder", "falcon",
                                        "starcoder", "refact",    "mpt",   "command-r",    "gemma-4"};

// Decoding the ids of every vector gives its text back, byte for byte, for
// byte-level BPE (added tokens included) and Gemma 4's pieces.
TEST(TokenizerVectors, BpeDecodingGivesTheTextBack) {
  for (const char* name : kBpeVocabularies) {
    const Tokenizer tokenizer = load_vocab(name);
    for (const auto& v : read_vectors(name)) {
      std::string decoded;
      for (std::size_t i = 0; i < v.ids.size(); ++i) decoded += tokenizer.decode(i ? v.ids[i - 1] : -1, v.ids[i]);
      EXPECT_EQ(decoded, v.text) << name;
    }
  }
}

// The text a SentencePiece token stands for: its piece with U+2581 as a
// space, or the byte of a `<0xNN>` piece.
std::string piece_text(const Tokenizer& tokenizer, int id) {
  const std::string& piece = tokenizer.piece(id);
  if (piece.size() == 6 && piece.rfind("<0x", 0) == 0)
    return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
  std::string text;
  for (std::size_t at = 0; at < piece.size();) {
    const bool space = piece.compare(at, 3, "\xE2\x96\x81") == 0;
    text += space ? std::string(" ") : piece.substr(at, 1);
    at += space ? 3 : 1;
  }
  return text;
}

// Baichuan's vocabulary has no vectors: it reads as SentencePiece, and the
// pieces of every text's tokens spell the text after the dummy-prefix
// space (bytes it has no piece for included).
TEST(TokenizerVectors, BaichuanSentencePieceSpellsTheText) {
  const Tokenizer tokenizer = load_vocab("baichuan");
  EXPECT_EQ(tokenizer.kind(), TokenizerKind::sentencepiece);
  EXPECT_TRUE(tokenizer.add_bos());
  for (const auto& v : read_vectors("llama-spm")) {
    auto ids = tokenizer.encode(v.text, false, false);
    ASSERT_TRUE(ids) << ids.error().message();
    std::string spelt;
    for (int id : *ids) spelt += piece_text(tokenizer, id);
    EXPECT_EQ(spelt, v.text.empty() ? "" : " " + v.text);
  }
}

// A vocabulary written back into a GGUF file reads as the same tokenizer.
TEST(TokenizerVectors, VocabulariesSurviveAGgufRoundTrip) {
  test::TempDir dir;
  for (const char* vocab : {"llama-spm", "gpt-2", "llama-bpe", "gemma-4"}) {
    const Tokenizer original = load_vocab(vocab);
    ASSERT_TRUE(gguf::write(dir.file(vocab), original.gguf_metadata(), {}));
    auto copy = Tokenizer::load(dir.file(vocab));
    ASSERT_TRUE(copy) << copy.error().message();
    EXPECT_EQ(copy->kind(), original.kind());
    EXPECT_EQ(copy->bos_id(), original.bos_id());
    EXPECT_EQ(copy->eos_id(), original.eos_id());
    EXPECT_EQ(copy->add_bos(), original.add_bos());
    EXPECT_EQ(copy->end_of_generation(), original.end_of_generation());
    for (const auto& v : read_vectors(vocab)) EXPECT_EQ(*copy->encode(v.text, false, false), v.ids) << vocab;
  }
}

// A llama2.c vocabulary becomes a GGUF "llama" one (spaces as U+2581) that
// encodes every text as the original does.
TEST(TokenizerVectors, Llama2cVocabularyConvertsToSentencePiece) {
  test::TempDir dir;
  auto original = Tokenizer::load_llama2c(test::stories_tokenizer());
  ASSERT_TRUE(original);
  ASSERT_TRUE(gguf::write(dir.file("tok.gguf"), original->gguf_metadata(), {}));
  auto copy = Tokenizer::load(dir.file("tok.gguf"));
  ASSERT_TRUE(copy) << copy.error().message();
  EXPECT_EQ(copy->kind(), TokenizerKind::sentencepiece);
  EXPECT_EQ(copy->piece(403), "\xE2\x96\x81Once");
  for (const auto& v : read_vectors("llama-spm")) {
    auto a = original->encode(v.text, true, false);
    auto b = copy->encode(v.text, true, false);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(*a, *b) << v.text;
    for (std::size_t i = 1; i < a->size(); ++i) {
      EXPECT_EQ(original->decode((*a)[i - 1], (*a)[i]), copy->decode((*b)[i - 1], (*b)[i]));
    }
  }
}

// Ordinary English prose, repeated to any length.
std::string prose(std::size_t bytes) {
  const std::string paragraph =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine. One day, "
      "she saw a big, red ball in the park and asked her mom if she could play with it. \"Of course,\" said mom. ";
  std::string text;
  while (text.size() < bytes) text += paragraph;
  text.resize(bytes);
  return text;
}

// The work of encoding `text` at its length and at twice its length.
double cost_ratio_of_doubling(const Tokenizer& tokenizer, const std::string& twice) {
  EncodeCost half_cost;
  EncodeCost whole_cost;
  EXPECT_TRUE(tokenizer.encode(std::string_view(twice).substr(0, twice.size() / 2), true, false, &half_cost));
  EXPECT_TRUE(tokenizer.encode(twice, true, false, &whole_cost));
  EXPECT_GT(half_cost.total(), 0u);
  return static_cast<double>(whole_cost.total()) / static_cast<double>(half_cost.total());
}

// Encoding is O(n log n): a text twice as long costs at most 2.2 times the
// work, for prose, for one long word (a single pre-tokenizer word is
// merged as a whole) and for one long run of spaces (which backtracking
// pre-tokenizer patterns such as deepseek-llm's `\s+$` would rescan), with
// each kind of tokenizer. Pairwise rescanning (O(n^2)) costs four times.
TEST(TokenizerCost, TwiceTheTextCostsAboutTwiceTheWork) {
  const Tokenizer stories = test::load_stories_tokenizer();
  const Tokenizer spm = load_vocab("llama-spm");
  const Tokenizer bpe = load_vocab("gpt-2");
  const Tokenizer llama3 = load_vocab("llama-bpe");
  const Tokenizer deepseek = load_vocab("deepseek-llm");
  const Tokenizer gemma4 = load_vocab("gemma-4");
  for (const Tokenizer* tokenizer : {&stories, &spm, &bpe, &llama3, &deepseek, &gemma4}) {
    for (const std::string& text : {prose(64 * 1024), std::string(16 * 1024, 'a'), std::string(16 * 1024, ' ')}) {
      const double ratio = cost_ratio_of_doubling(*tokenizer, text);
      EXPECT_LE(ratio, 2.2) << "vocabulary of " << tokenizer->vocab_size() << ", " << text.size() << " bytes";
      EXPECT_GE(ratio, 1.8);  // the count does grow with the text
    }
  }
}

// run.c's merge loop, as it was before the queue: rescan every pair, merge
// the best-scoring one, leftmost on ties.
std::vector<int> merged_by_rescanning(const Tokenizer& tokenizer, std::vector<int> tokens) {
  std::unordered_map<std::string, int> ids;
  for (int id = tokenizer.vocab_size() - 1; id >= 0; --id) ids[tokenizer.piece(id)] = id;
  for (;;) {
    float best_score = -1e10f;
    int best_id = -1;
    std::size_t best_index = 0;
    for (std::size_t i = 0; i + 1 < tokens.size(); ++i) {
      const auto it = ids.find(tokenizer.piece(tokens[i]) + tokenizer.piece(tokens[i + 1]));
      if (it != ids.end() && tokenizer.score(it->second) > best_score) {
        best_score = tokenizer.score(it->second);
        best_id = it->second;
        best_index = i;
      }
    }
    if (best_id < 0) return tokens;
    tokens[best_index] = best_id;
    tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best_index) + 1);
  }
}

// The queue merges exactly as rescanning does, ties included, on random
// texts of a small alphabet (many equal pairs, many ties).
TEST(TokenizerCost, TheQueueMergesAsRescanningDoes) {
  const Tokenizer tokenizer = test::load_stories_tokenizer();
  std::mt19937 random(7);
  const std::string alphabet = "aeiou tnsrhl.,";
  for (int round = 0; round < 200; ++round) {
    std::string text(1 + random() % 200, ' ');
    for (char& c : text) c = alphabet[random() % alphabet.size()];
    auto merged = tokenizer.encode(text, false, false);
    ASSERT_TRUE(merged);
    // One token per character, the dummy prefix first: what the merges start from.
    std::vector<int> characters;
    for (char c : " " + text) {
      const std::string piece(1, c);
      for (int id = 0; id < tokenizer.vocab_size(); ++id) {
        if (tokenizer.piece(id) == piece) {
          characters.push_back(id);
          break;
        }
      }
    }
    ASSERT_EQ(characters.size(), text.size() + 1);
    EXPECT_EQ(*merged, merged_by_rescanning(tokenizer, characters)) << "'" << text << "'";
  }
}

}  // namespace
}  // namespace accord
