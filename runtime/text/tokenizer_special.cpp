// Special tokens: cutting them out of the text, and the tokens that end
// generation (llama.cpp's tokenizer_st_partition and the special-token
// part of llama_vocab::impl::load).
#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <string_view>

#include "runtime/text/tokenizer.hpp"

namespace accord {

namespace {

// Token texts that end generation in llama.cpp (its EOT, EOM and
// end-of-generation names, and the FIM pad / repo / file-separator names).
constexpr std::array<std::string_view, 33> kEndOfGenerationNames = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
    "<|fim_pad|>",
    "<fim-pad>",
    "<fim_pad>",
    "<PAD>",
    "[PAD]",
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
    "<|file_sep|>",
};

// FIM prefix / suffix / middle names: control tokens, not the end.
constexpr std::array<std::string_view, 24> kFillInTheMiddleNames = {
    "<|fim_prefix|>",  "<fim-prefix>",  "<fim_prefix>",    "<｜fim▁begin｜>", "<PRE>",           "▁<PRE>",
    "<|code_prefix|>", "<|prefix|>",    "<|fim_suffix|>",  "<fim-suffix>",    "<fim_suffix>",    "<｜fim▁hole｜>",
    "<SUF>",           "▁<SUF>",        "<|code_suffix|>", "<|suffix|>",      "<|fim_middle|>",  "<fim-middle>",
    "<fim_middle>",    "<｜fim▁end｜>", "<MID>",           "▁<MID>",          "<|code_middle|>", "<|middle|>",
};

template <std::size_t N>
bool named(const std::array<std::string_view, N>& names, const std::string& piece) {
  return std::find(names.begin(), names.end(), piece) != names.end();
}

bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

}  // namespace

// Text between the cut tokens, in order. Each special token, longest
// first, is cut wherever it occurs in the text still uncut.
std::vector<Tokenizer::Fragment> Tokenizer::partition(std::string_view text, bool parse_special) const {
  std::vector<Fragment> fragments;
  if (!text.empty()) fragments.push_back({0, text.size(), -1});
  for (const int id : special_tokens_) {
    const std::uint8_t attributes = this->attributes(id);
    if (!parse_special && (attributes & (kTokenControl | kTokenUnknown)) != 0) continue;
    const std::string& special = piece(id);
    std::vector<Fragment> cut;
    for (const Fragment& fragment : fragments) {
      if (fragment.token >= 0) {
        cut.push_back(fragment);
        continue;
      }
      std::size_t begin = fragment.begin;
      std::size_t length = fragment.length;
      for (std::size_t match;
           (match = text.substr(0, begin + length).find(special, begin)) != std::string_view::npos;) {
        if (match > begin) cut.push_back({begin, match - begin, -1});
        cut.push_back({match, special.size(), id});
        length -= match + special.size() - begin;
        begin = match + special.size();
        if ((attributes & kTokenStripRight) == 0) continue;
        for (; length > 0 && is_space(text[begin]); --length) ++begin;
      }
      if (length > 0) cut.push_back({begin, length, -1});
    }
    fragments = std::move(cut);
  }
  return fragments;
}

void Tokenizer::collect_special_tokens() {
  special_tokens_.clear();
  for (int id = 0; id < vocab_size(); ++id) {
    if ((attributes(id) & (kTokenControl | kTokenUserDefined | kTokenUnknown)) != 0 && !piece(id).empty()) {
      special_tokens_.push_back(id);
    }
  }
  std::stable_sort(special_tokens_.begin(), special_tokens_.end(),
                   [&](int a, int b) { return piece(a).size() > piece(b).size(); });
}

// llama.cpp's end-of-generation set: `keyed` (EOS, EOT, EOM and the FIM
// ids the file names) and the tokens named as above, which become control
// tokens; then its two corrections for vocabularies where such a name is
// an ordinary token.
void Tokenizer::find_end_of_generation(const std::vector<int>& keyed) {
  std::set<int> ends;
  for (int id : keyed) {
    if (id >= 0) ends.insert(id);
  }
  std::map<std::string_view, int> found;
  for (int id = 0; id < vocab_size(); ++id) {
    const std::string& text = piece(id);
    const bool ends_generation = named(kEndOfGenerationNames, text);
    if (!ends_generation && !named(kFillInTheMiddleNames, text)) continue;
    attributes_[static_cast<std::size_t>(id)] |= kTokenControl;
    if (ends_generation) ends.insert(id);
    found.emplace(text, id);
  }
  const auto has = [&](std::string_view text) { return found.count(text) != 0 && ends.count(found[text]) != 0; };
  // o200k_harmony and solar-open: <|end|> ends a message, not the answer.
  if (has("<|end|>") && ((has("<|return|>") && has("<|call|>")) || (has("<|calls|>") && has("<|flush|>")))) {
    ends.erase(found["<|end|>"]);
    attributes_[static_cast<std::size_t>(found["<|end|>"])] = kTokenUserDefined;
  }
  // Gemma 4: </s> is an ordinary token there.
  if (has("</s>") && has("<|tool_response>")) {
    ends.erase(found["</s>"]);
    attributes_[static_cast<std::size_t>(found["</s>"])] = kTokenNormal;
  }
  end_of_generation_.assign(ends.begin(), ends.end());
}

// llama.cpp's rule for Phi-3 models: whitespace after a special token
// (and </s>) is dropped, except after <unk>, <s> and <|endoftext|>.
void Tokenizer::strip_right_of_special_tokens() {
  for (int id : special_tokens_) attributes_[static_cast<std::size_t>(id)] |= kTokenStripRight;
  for (std::string_view text : {"</s>", "<unk>", "<s>", "<|endoftext|>"}) {
    const int id = lookup(text);
    if (id < 0) continue;
    std::uint8_t& attributes = attributes_[static_cast<std::size_t>(id)];
    attributes = text == "</s>" ? (attributes | kTokenStripRight) : (attributes & ~kTokenStripRight);
  }
}

}  // namespace accord
