// Tokenizer <-> the tokenizer.ggml.* metadata of GGUF files.
#include <algorithm>
#include <array>
#include <cctype>
#include <optional>

#include "runtime/text/tokenizer.hpp"

namespace accord {

namespace {

using gguf::Value;
using gguf::ValueType;

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581

// llama.cpp's token types (tokenizer.ggml.token_type) and the attribute
// each stands for.
constexpr std::array<std::pair<std::int64_t, std::uint8_t>, 6> kTokenTypes = {{
    {1, kTokenNormal},
    {2, kTokenUnknown},
    {3, kTokenControl},
    {4, kTokenUserDefined},
    {5, kTokenUnused},
    {6, kTokenByte},
}};

std::uint8_t attributes_of_type(std::int64_t type) {
  for (const auto& [known, attributes] : kTokenTypes) {
    if (known == type) return attributes;
  }
  return 0;  // undefined
}

std::int64_t type_of_attributes(std::uint8_t attributes) {
  for (const auto& [type, known] : kTokenTypes) {
    if ((attributes & known) != 0 && known != kTokenNormal) return type;
  }
  return attributes == 0 ? 0 : 1;
}

class VocabularyReader {
 public:
  VocabularyReader(const gguf::File& file, const std::string& name) : file_(file), name_(name) {}

  Error error(const std::string& key, const std::string& problem) const {
    return Error(ErrorCode::format, name_ + ": metadata " + key + ": " + problem);
  }

  // The elements of an array of `element` values; nullptr when absent.
  Result<const Value::Array*> array(const std::string& key, ValueType element, bool required) const {
    const Value* value = file_.find(key);
    if (value == nullptr) {
      if (required) return Error(ErrorCode::format, name_ + ": missing metadata key " + key);
      return static_cast<const Value::Array*>(nullptr);
    }
    auto items = value->as_array();
    if (!items) return error(key, items.error().message());
    if (value->element_type() != element) {
      return error(key, "expected an array of " + std::string(gguf::to_string(element)) + ", found one of " +
                            std::string(gguf::to_string(value->element_type())));
    }
    return *items;
  }

  Result<std::vector<std::string>> strings(const std::string& key, bool required) const {
    auto items = array(key, ValueType::string, required);
    if (!items) return items.error();
    std::vector<std::string> out;
    if (*items == nullptr) return out;
    out.reserve((*items)->size());
    for (const Value& item : **items) out.emplace_back(*item.as_string());
    return out;
  }

  Result<std::vector<float>> scores(std::size_t count) const {
    const std::string key = "tokenizer.ggml.scores";
    auto items = array(key, ValueType::f32, false);
    if (!items) return items.error();
    if (*items == nullptr) return std::vector<float>(count, 0.0f);
    if ((*items)->size() != count) {
      return error(key, std::to_string((*items)->size()) + " scores for " + std::to_string(count) + " tokens");
    }
    std::vector<float> out;
    out.reserve(count);
    for (const Value& item : **items) out.push_back(static_cast<float>(*item.as_float()));
    return out;
  }

  // A token id: absent gives `fallback`; present must lie in the vocabulary.
  Result<int> token_id(const std::string& key, int fallback, int vocab_size) const {
    const Value* value = file_.find(key);
    if (value == nullptr) return fallback;
    auto id = value->as_int();
    if (!id) return error(key, id.error().message());
    if (*id < 0 || *id >= vocab_size) {
      return error(key, "token " + std::to_string(*id) + " is outside the vocabulary of " + std::to_string(vocab_size));
    }
    return static_cast<int>(*id);
  }

  Result<bool> flag(const std::string& key, bool fallback) const {
    const Value* value = file_.find(key);
    if (value == nullptr) return fallback;
    auto b = value->as_bool();
    if (!b) return error(key, b.error().message());
    return *b;
  }

  Result<TokenizerKind> kind() const {
    const std::string key = "tokenizer.ggml.model";
    const Value* value = file_.find(key);
    if (value == nullptr) return Error(ErrorCode::format, name_ + ": no vocabulary (missing metadata key " + key + ")");
    auto model = value->as_string();
    if (!model) return error(key, model.error().message());
    if (*model == "llama") return TokenizerKind::sentencepiece;
    if (*model == "gpt2") return TokenizerKind::byte_bpe;
    if (*model == "gemma4") return TokenizerKind::piece_bpe;
    return Error(ErrorCode::architecture, name_ + ": tokenizer model '" + std::string(*model) +
                                              "' (tokenizer.ggml.model) is not supported (accord reads 'llama', "
                                              "'gpt2' and 'gemma4')");
  }

  // A string value; `fallback` when absent.
  Result<std::string> text(const std::string& key, const std::string& fallback) const {
    const Value* value = file_.find(key);
    if (value == nullptr) return fallback;
    auto text = value->as_string();
    if (!text) return error(key, text.error().message());
    return std::string(*text);
  }

  // TokenAttribute bits per token from tokenizer.ggml.token_type; all
  // normal when absent.
  Result<std::vector<std::uint8_t>> attributes(std::size_t count) const {
    const std::string key = "tokenizer.ggml.token_type";
    auto items = array(key, ValueType::i32, false);
    if (!items) return items.error();
    if (*items == nullptr) return std::vector<std::uint8_t>(count, kTokenNormal);
    if ((*items)->size() != count) {
      return error(key, std::to_string((*items)->size()) + " types for " + std::to_string(count) + " tokens");
    }
    std::vector<std::uint8_t> out;
    out.reserve(count);
    for (const Value& item : **items) out.push_back(attributes_of_type(*item.as_int()));
    return out;
  }

 private:
  const gguf::File& file_;
  const std::string& name_;
};

std::string escape_spaces(const std::string& piece) {
  std::string out;
  for (char c : piece) {
    if (c == ' ') {
      out += kSpaceMark;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

Value string_array(const std::vector<std::string>& items) {
  Value::Array values;
  values.reserve(items.size());
  for (const auto& item : items) values.push_back(Value::string(item));
  return Value::array(ValueType::string, std::move(values));
}

}  // namespace

Result<Tokenizer> Tokenizer::from_gguf(const gguf::File& file, const std::string& name) {
  const VocabularyReader read(file, name);
  auto kind = read.kind();
  if (!kind) return kind.error();
  const bool bpe = *kind != TokenizerKind::sentencepiece;
  auto pieces = read.strings("tokenizer.ggml.tokens", true);
  if (!pieces) return pieces.error();
  if (pieces->empty()) return read.error("tokenizer.ggml.tokens", "the vocabulary is empty");
  const int vocab = static_cast<int>(std::min<std::size_t>(pieces->size(), INT32_MAX));
  auto scores = read.scores(pieces->size());
  if (!scores) return scores.error();
  auto merges = read.strings("tokenizer.ggml.merges", bpe);
  if (!merges) return merges.error();
  auto bos = read.token_id("tokenizer.ggml.bos_token_id", bpe ? -1 : 1, vocab);
  if (!bos) return bos.error();
  auto eos = read.token_id("tokenizer.ggml.eos_token_id", bpe ? -1 : 2, vocab);
  if (!eos) return eos.error();
  auto space_prefix = read.flag("tokenizer.ggml.add_space_prefix", !bpe);
  if (!space_prefix) return space_prefix.error();

  auto t = build(*kind, std::move(*pieces), std::move(*scores), *bos, *eos);
  if (!t) return Error(t.error().code(), name + ": " + t.error().message());
  t->add_space_prefix_ = *space_prefix;
  t->merges_ = std::move(*merges);
  for (std::size_t rank = 0; rank < t->merges_.size(); ++rank) {
    // llama.cpp splits a merge at its first space after the first byte.
    const std::string& merge = t->merges_[rank];
    const std::size_t space = merge.find(' ', 1);
    std::string key = space == std::string::npos ? std::string(1, '\0') : merge;
    if (space != std::string::npos) key[space] = '\0';
    t->merge_ranks_.emplace(std::move(key), static_cast<int>(std::min<std::size_t>(rank, INT32_MAX)));
  }
  if (Status ok = t->read_gguf_details(file, name); !ok) return ok.error();
  return std::move(*t);
}

// The pre-tokenizer, token attributes, BOS / EOS use and the tokens that
// end generation, as llama.cpp's vocabulary load reads them.
Status Tokenizer::read_gguf_details(const gguf::File& file, const std::string& name) {
  const VocabularyReader read(file, name);
  if (kind_ != TokenizerKind::sentencepiece) {
    auto pre = read.text("tokenizer.ggml.pre", "default");
    if (!pre) return pre.error();
    auto named = PreTokenizer::named(kind_ == TokenizerKind::piece_bpe ? "gemma4" : *pre);
    if (!named) return Error(named.error().code(), name + ": " + named.error().message());
    pre_ = std::move(*named);
  }
  auto attributes = read.attributes(pieces_.size());
  if (!attributes) return attributes.error();
  attributes_ = std::move(*attributes);
  const bool spm = kind_ == TokenizerKind::sentencepiece;
  auto add_bos = read.flag("tokenizer.ggml.add_bos_token", spm || pre_.add_bos());
  if (!add_bos) return add_bos.error();
  auto add_eos = read.flag("tokenizer.ggml.add_eos_token", false);
  if (!add_eos) return add_eos.error();
  add_bos_ = *add_bos || kind_ == TokenizerKind::piece_bpe;  // llama.cpp's override for Gemma 4
  add_eos_ = *add_eos;
  std::vector<int> ends = {eos_id_};
  for (const char* key : {"eot", "eom", "fim_pad", "fim_rep", "fim_sep"}) {
    auto id = read.token_id(std::string("tokenizer.ggml.") + key + "_token_id", -1, vocab_size());
    if (!id) return id.error();
    ends.push_back(*id);
  }
  find_end_of_generation(ends);
  collect_special_tokens();
  auto model_name = read.text("general.name", "");
  if (!model_name) return model_name.error();
  std::string lower = *model_name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower.find("phi-3") != std::string::npos || lower.find("phi3") != std::string::npos) {
    strip_right_of_special_tokens();
  }
  return {};
}

gguf::Metadata Tokenizer::gguf_metadata() const {
  const bool bpe = kind_ == TokenizerKind::byte_bpe || kind_ == TokenizerKind::piece_bpe;
  std::vector<std::string> pieces = pieces_;
  if (kind_ == TokenizerKind::llama2c) {
    for (auto& piece : pieces) piece = escape_spaces(piece);
  }
  Value::Array scores, types;
  for (int id = 0; id < vocab_size(); ++id) {
    scores.push_back(Value::floating(ValueType::f32, scores_[static_cast<std::size_t>(id)]));
    types.push_back(Value::signed_int(ValueType::i32, type_of_attributes(attributes(id))));
  }
  const char* model = kind_ == TokenizerKind::piece_bpe ? "gemma4" : bpe ? "gpt2" : "llama";
  gguf::Metadata metadata = {{"tokenizer.ggml.model", Value::string(model)},
                             {"tokenizer.ggml.tokens", string_array(pieces)},
                             {"tokenizer.ggml.scores", Value::array(ValueType::f32, std::move(scores))},
                             {"tokenizer.ggml.token_type", Value::array(ValueType::i32, std::move(types))}};
  if (bpe) metadata.emplace_back("tokenizer.ggml.merges", string_array(merges_));
  if (kind_ == TokenizerKind::byte_bpe) metadata.emplace_back("tokenizer.ggml.pre", Value::string(pre_.name()));
  metadata.emplace_back("tokenizer.ggml.add_bos_token", Value::boolean(add_bos_));
  metadata.emplace_back("tokenizer.ggml.add_eos_token", Value::boolean(add_eos_));
  auto id_value = [](int id) { return Value::unsigned_int(ValueType::u32, static_cast<std::uint64_t>(id)); };
  if (bos_id_ >= 0 && bos_id_ < vocab_size()) metadata.emplace_back("tokenizer.ggml.bos_token_id", id_value(bos_id_));
  if (eos_id_ >= 0 && eos_id_ < vocab_size()) metadata.emplace_back("tokenizer.ggml.eos_token_id", id_value(eos_id_));
  if (!bpe) metadata.emplace_back("tokenizer.ggml.add_space_prefix", Value::boolean(add_space_prefix_));
  return metadata;
}

}  // namespace accord
