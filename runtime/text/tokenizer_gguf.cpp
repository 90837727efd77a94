// Tokenizer <-> the tokenizer.ggml.* metadata of GGUF files.
#include <optional>

#include "runtime/text/tokenizer.hpp"

namespace accord {

namespace {

using gguf::Value;
using gguf::ValueType;

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581

// llama.cpp's token types.
constexpr std::int64_t kNormal = 1, kUnknown = 2, kControl = 3, kByte = 6;

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
    return Error(ErrorCode::architecture, name_ + ": tokenizer model '" + std::string(*model) +
                                              "' is not supported (accord reads 'llama' and 'gpt2')");
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
  const bool bpe = *kind == TokenizerKind::byte_bpe;
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
    t->merge_ranks_.emplace(t->merges_[rank], static_cast<int>(std::min<std::size_t>(rank, INT32_MAX)));
  }
  return std::move(*t);
}

gguf::Metadata Tokenizer::gguf_metadata() const {
  const bool bpe = kind_ == TokenizerKind::byte_bpe;
  std::vector<std::string> pieces = pieces_;
  if (kind_ == TokenizerKind::llama2c) {
    for (auto& piece : pieces) piece = escape_spaces(piece);
  }
  Value::Array scores, types;
  for (int id = 0; id < vocab_size(); ++id) {
    scores.push_back(Value::floating(ValueType::f32, scores_[static_cast<std::size_t>(id)]));
    std::int64_t type = kNormal;
    if (id == bos_id_ || id == eos_id_) {
      type = kControl;
    } else if (!bpe && is_byte_piece(id)) {
      type = kByte;
    } else if (!bpe && pieces_[static_cast<std::size_t>(id)] == "<unk>") {
      type = kUnknown;
    }
    types.push_back(Value::signed_int(ValueType::i32, type));
  }
  gguf::Metadata metadata = {{"tokenizer.ggml.model", Value::string(bpe ? "gpt2" : "llama")},
                             {"tokenizer.ggml.tokens", string_array(pieces)},
                             {"tokenizer.ggml.scores", Value::array(ValueType::f32, std::move(scores))},
                             {"tokenizer.ggml.token_type", Value::array(ValueType::i32, std::move(types))}};
  if (bpe) metadata.emplace_back("tokenizer.ggml.merges", string_array(merges_));
  auto id_value = [](int id) { return Value::unsigned_int(ValueType::u32, static_cast<std::uint64_t>(id)); };
  if (bos_id_ >= 0 && bos_id_ < vocab_size()) metadata.emplace_back("tokenizer.ggml.bos_token_id", id_value(bos_id_));
  if (eos_id_ >= 0 && eos_id_ < vocab_size()) metadata.emplace_back("tokenizer.ggml.eos_token_id", id_value(eos_id_));
  if (!bpe) metadata.emplace_back("tokenizer.ggml.add_space_prefix", Value::boolean(add_space_prefix_));
  return metadata;
}

}  // namespace accord
