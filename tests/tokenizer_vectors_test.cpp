// llama.cpp's tokenizer test vectors (../shared/tokenizer-vectors): every
// string of <vocab>.gguf.inp must encode to the ids of its .out line, with
// add_special = false (no BOS/EOS).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "runtime/model/tokenizer.hpp"
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

// The .inp strings are each followed by the separator; the .out lines hold
// the ids of one string each.
std::vector<Vector> read_vectors(const std::string& vocab) {
  const auto dir = test::shared_dir() / "tokenizer-vectors";
  const std::string inputs = read_text(dir / (vocab + ".inp"));
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<Vector> vectors;
  for (std::size_t at = 0, next; (next = inputs.find(separator, at)) != std::string::npos;
       at = next + separator.size()) {
    vectors.push_back({inputs.substr(at, next - at), {}});
  }
  std::istringstream outputs(read_text(dir / (vocab + ".out")));
  std::string line;
  for (auto& v : vectors) {
    if (!std::getline(outputs, line)) break;
    std::istringstream ids(line);
    for (int id; ids >> id;) v.ids.push_back(id);
  }
  return vectors;
}

Tokenizer load_vocab(const std::string& vocab) {
  auto t = Tokenizer::load((test::shared_dir() / "tokenizer-vectors" / vocab).string());
  if (!t) {
    ADD_FAILURE() << t.error().message();
    std::abort();
  }
  return std::move(*t);
}

void expect_all_vectors_pass(const std::string& vocab, TokenizerKind kind) {
  const Tokenizer tokenizer = load_vocab(vocab);
  EXPECT_EQ(tokenizer.kind(), kind);
  const auto vectors = read_vectors(vocab);
  ASSERT_EQ(vectors.size(), 46u);
  for (const auto& v : vectors) {
    auto ids = tokenizer.encode(v.text, false, false);
    ASSERT_TRUE(ids) << ids.error().message();
    EXPECT_EQ(*ids, v.ids) << vocab << ": '" << v.text << "'";
  }
}

TEST(TokenizerVectors, LlamaSentencePiece) {
  expect_all_vectors_pass("ggml-vocab-llama-spm.gguf", TokenizerKind::sentencepiece);
}

TEST(TokenizerVectors, Gpt2ByteLevelBpe) { expect_all_vectors_pass("ggml-vocab-gpt-2.gguf", TokenizerKind::byte_bpe); }

TEST(TokenizerVectors, ByteLevelDecodingGivesTheTextBack) {
  const Tokenizer tokenizer = load_vocab("ggml-vocab-gpt-2.gguf");
  for (const auto& v : read_vectors("ggml-vocab-gpt-2.gguf")) {
    std::string decoded;
    for (std::size_t i = 0; i < v.ids.size(); ++i) decoded += tokenizer.decode(i ? v.ids[i - 1] : -1, v.ids[i]);
    EXPECT_EQ(decoded, v.text);
  }
}

// A vocabulary written back into a GGUF file reads as the same tokenizer.
TEST(TokenizerVectors, VocabulariesSurviveAGgufRoundTrip) {
  test::TempDir dir;
  for (const char* vocab : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"}) {
    const Tokenizer original = load_vocab(vocab);
    ASSERT_TRUE(gguf::write(dir.file(vocab), original.gguf_metadata(), {}));
    auto copy = Tokenizer::load(dir.file(vocab));
    ASSERT_TRUE(copy) << copy.error().message();
    EXPECT_EQ(copy->kind(), original.kind());
    EXPECT_EQ(copy->bos_id(), original.bos_id());
    EXPECT_EQ(copy->eos_id(), original.eos_id());
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
  for (const auto& v : read_vectors("ggml-vocab-llama-spm.gguf")) {
    auto a = original->encode(v.text, true, false);
    auto b = copy->encode(v.text, true, false);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(*a, *b) << v.text;
    for (std::size_t i = 1; i < a->size(); ++i) {
      EXPECT_EQ(original->decode((*a)[i - 1], (*a)[i]), copy->decode((*b)[i - 1], (*b)[i]));
    }
  }
}

}  // namespace
}  // namespace accord
