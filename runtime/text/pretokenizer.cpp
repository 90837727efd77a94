#include "runtime/text/pretokenizer.hpp"

#include <array>
#include <initializer_list>

#include "runtime/base/utf8.hpp"
#include "runtime/text/unicode.hpp"

namespace accord {

namespace {

// GPT-2's expression; llama.cpp's lists leave out its final `|\s+`.
constexpr std::string_view kGpt2 = R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";
constexpr std::string_view kLlama3 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kQwen2 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kCjk = R"re([一-龥ࠀ-一가-퟿]+)re";

struct Kind {
  std::initializer_list<std::string_view> names;  // tokenizer.ggml.pre values
  std::initializer_list<std::string_view> patterns;
  bool byte_encode = true;
  bool ignore_merges = false;
  bool escape_whitespace = false;
  bool add_bos = false;
};

// llama.cpp's table (src/llama-vocab.cpp, llm_tokenizer_bpe) for the kinds
// accord reads.
const std::array<Kind, 10>& kinds() {
  static const std::array<Kind, 10> table = {{
      {{"default"}, {R"re([\p{P}\$\+<=>\^~\|]+)re", kGpt2, R"re(\p{N}+)re", "[0-9][0-9][0-9]"}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"}, {kLlama3}, true, true, false, true},
      {{"dbrx", "smaug-bpe"}, {kLlama3}},
      {{"qwen2", "deepseek-r1-qwen", "stablelm2", "hunyuan"}, {kQwen2}},
      // Characters that Unicode normalization would change (U+1F7D, U+212A,
      // ...) are written \uHHHH, so that no editor turns a range around.
      {{"deepseek-llm"},
       {R"re([\r\n])re",
        R"re(\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u1F7Dᾀ-ᾴᾶ-ᾼ\u1FBEῂ-ῄῆ-ῌῐ-\u1FD3ῖ-\u1FDBῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212A-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+)re",
        R"re(\s?[!-/:-~！-／：-～‘-‟　-。]+)re", R"re(\s+$)re", kCjk, R"re(\p{N}+)re"}},
      {{"deepseek-coder"}, {R"re([\r\n])re", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re", kCjk, R"re(\p{N})re"}},
      {{"falcon"}, {R"re([\p{P}\$\+<=>\^~\|`]+)re", kGpt2, "[0-9][0-9][0-9]"}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}, {R"re(\p{N})re", kGpt2}},
      {{"gpt-2", "mpt", "phi-2", "olmo", "jais", "trillion", "granite-docling"}, {kGpt2}},
      // Gemma 4 merges SentencePiece-style pieces (spaces as U+2581, raw
      // UTF-8) over whole lines.
      {{"gemma4"}, {R"re([^\n]+|[\n]+)re"}, false, false, true, true},
  }};
  return table;
}

}  // namespace

Result<PreTokenizer> PreTokenizer::named(std::string_view name) {
  for (const Kind& kind : kinds()) {
    for (std::string_view known : kind.names) {
      if (known != name) continue;
      PreTokenizer pre;
      pre.name_ = std::string(name);
      for (std::string_view expression : kind.patterns) {
        auto pattern = unicode::Pattern::compile(expression);
        if (!pattern) return pattern.error();
        pre.patterns_.push_back(std::move(*pattern));
      }
      pre.byte_encode_ = kind.byte_encode;
      pre.ignore_merges_ = kind.ignore_merges;
      pre.escape_whitespace_ = kind.escape_whitespace;
      pre.add_bos_ = kind.add_bos;
      return pre;
    }
  }
  return Error(ErrorCode::architecture,
               "pre-tokenizer '" + std::string(name) + "' (tokenizer.ggml.pre) is not supported");
}

std::vector<std::string> PreTokenizer::words(std::string_view text, std::uint64_t& steps) const {
  std::vector<std::uint32_t> code_points;
  std::vector<unicode::MatchChar> chars;
  for (std::size_t at = 0; at < text.size();) {
    const unicode::CodePoint cp = unicode::decode_utf8(text, at);
    code_points.push_back(cp.valid ? cp.value : 0xFFFD);
    chars.push_back(unicode::match_char(code_points.back()));
    at += cp.length;
  }
  std::vector<std::size_t> lengths = {chars.size()};
  for (const unicode::Pattern& pattern : patterns_) {
    std::vector<std::size_t> split;
    std::size_t start = 0;
    for (std::size_t length : lengths) {
      pattern.split(std::span(chars).subspan(start, length), split, steps);
      start += length;
    }
    lengths = std::move(split);
  }
  std::vector<std::string> words;
  std::size_t start = 0;
  for (std::size_t length : lengths) {
    std::string utf8;
    for (std::size_t i = start; i < start + length; ++i) unicode::append_utf8(utf8, code_points[i]);
    start += length;
    if (!byte_encode_) {
      words.push_back(std::move(utf8));
      continue;
    }
    std::string encoded;
    for (char c : utf8) encoded += unicode::byte_to_unicode(static_cast<std::uint8_t>(c));
    words.push_back(std::move(encoded));
  }
  return words;
}

}  // namespace accord
