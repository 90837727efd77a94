#include "runtime/text/tokenizer.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <queue>

#include "runtime/io/mapped_file.hpp"
#include "runtime/text/unicode.hpp"

namespace accord {

namespace {

// The byte a `<0xNN>` piece stands for, or -1 for any other piece.
int byte_piece_value(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int value = 0;
  for (char c : piece.substr(3, 2)) {
    value *= 16;
    if (c >= '0' && c <= '9') {
      value += c - '0';
    } else if (c >= 'A' && c <= 'F') {
      value += c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      value += c - 'a' + 10;
    } else {
      return -1;
    }
  }
  return value;
}

bool is_utf8_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// U+2581, the SentencePiece space of GGUF vocabularies.
constexpr std::string_view kSpaceMark = "\xE2\x96\x81";

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  for (std::size_t at = 0; at < text.size();) {
    if (text.substr(at, from.size()) == from) {
      out += to;
      at += from.size();
    } else {
      out.push_back(text[at++]);
    }
  }
  return out;
}

// Symbols being merged, as a doubly linked list over their first
// positions: a merge keeps the left symbol and unlinks the right one.
class SymbolList {
 public:
  explicit SymbolList(std::size_t size) : previous_(size), next_(size), alive_(size, true) {
    for (std::size_t i = 0; i < size; ++i) {
      previous_[i] = static_cast<int>(i) - 1;
      next_[i] = i + 1 < size ? static_cast<int>(i) + 1 : -1;
    }
  }
  int next(int at) const { return next_[static_cast<std::size_t>(at)]; }
  int previous(int at) const { return previous_[static_cast<std::size_t>(at)]; }
  bool alive(int at) const { return alive_[static_cast<std::size_t>(at)]; }
  // Unlinks the symbol after `at`, which takes its place.
  void absorb_next(int at) {
    const int gone = next(at);
    alive_[static_cast<std::size_t>(gone)] = false;
    const int after = next(gone);
    next_[static_cast<std::size_t>(at)] = after;
    if (after >= 0) previous_[static_cast<std::size_t>(after)] = at;
  }

 private:
  std::vector<int> previous_;
  std::vector<int> next_;
  std::vector<bool> alive_;
};

constexpr float kNoMergeScore = -1e10f;

// A SentencePiece merge candidate: the highest score comes first, the
// leftmost among equals (positions keep their order as symbols merge).
struct ScoredPair {
  float score;
  int left;
  int right;
  int left_id;  // the symbols' tokens when it was pushed
  int right_id;
  int id;  // the merged piece
  bool operator<(const ScoredPair& other) const {
    return score != other.score ? score < other.score : left > other.left;
  }
};

// A byte-level BPE merge candidate: the lowest rank first, then leftmost.
struct RankedPair {
  int rank;
  int left;
  int right;
  std::size_t left_size;  // the symbols' lengths when it was pushed
  std::size_t right_size;
  bool operator<(const RankedPair& other) const { return rank != other.rank ? rank > other.rank : left > other.left; }
};

}  // namespace

Result<Tokenizer> Tokenizer::build(TokenizerKind kind, std::vector<std::string> pieces, std::vector<float> scores,
                                   int bos_id, int eos_id) {
  if (pieces.empty()) return Error(ErrorCode::format, "the vocabulary is empty");
  if (pieces.size() != scores.size()) {
    return Error(ErrorCode::format, "the vocabulary has " + std::to_string(pieces.size()) + " pieces but " +
                                        std::to_string(scores.size()) + " scores");
  }
  Tokenizer t;
  t.kind_ = kind;
  t.pieces_ = std::move(pieces);
  t.scores_ = std::move(scores);
  t.bos_id_ = bos_id;
  t.eos_id_ = eos_id;
  t.byte_ids_.fill(-1);
  t.attributes_.assign(t.pieces_.size(), kTokenNormal);
  for (int id = 0; id < t.vocab_size(); ++id) {
    const std::string& piece = t.pieces_[static_cast<std::size_t>(id)];
    t.ids_.emplace(piece, id);
    t.longest_piece_bytes_ = std::max(t.longest_piece_bytes_, piece.size());
    const int byte = byte_piece_value(piece);
    if (byte >= 0 && t.byte_ids_[static_cast<std::size_t>(byte)] < 0) t.byte_ids_[static_cast<std::size_t>(byte)] = id;
  }
  return t;
}

// A llama2.c vocabulary has no token types: BOS and EOS are its control
// tokens, `<0xNN>` its byte tokens and `<unk>` its unknown one, as the
// GGUF "llama" vocabularies llama.cpp writes for such models say.
Result<Tokenizer> Tokenizer::from_pieces(std::vector<std::string> pieces, std::vector<float> scores, int bos_id,
                                         int eos_id) {
  auto t = build(TokenizerKind::llama2c, std::move(pieces), std::move(scores), bos_id, eos_id);
  if (!t) return t;
  for (int id = 0; id < t->vocab_size(); ++id) {
    std::uint8_t& attributes = t->attributes_[static_cast<std::size_t>(id)];
    if (id == bos_id || id == eos_id) {
      attributes = kTokenControl;
    } else if (t->is_byte_piece(id)) {
      attributes = kTokenByte;
    } else if (t->piece(id) == "<unk>") {
      attributes = kTokenUnknown;
    }
  }
  if (eos_id >= 0 && eos_id < t->vocab_size()) t->end_of_generation_ = {eos_id};
  t->collect_special_tokens();
  return t;
}

Result<Tokenizer> Tokenizer::load(const std::string& path) {
  auto file = MappedFile::open(path);
  if (!file) return file.error();
  if (!gguf::has_magic(file->bytes())) return read_llama2c(file->bytes(), path);
  auto parsed = gguf::parse(file->bytes(), path);
  if (!parsed) return parsed.error();
  return from_gguf(*parsed, path);
}

Status Tokenizer::check_fits(int model_vocab_size) const {
  if (vocab_size() == model_vocab_size) return {};
  return Error(ErrorCode::architecture, "the tokenizer has " + std::to_string(vocab_size()) +
                                            " tokens but the model's vocabulary has " +
                                            std::to_string(model_vocab_size));
}

Result<Tokenizer> Tokenizer::load_llama2c(const std::string& path) {
  auto file = MappedFile::open(path);
  if (!file) return file.error();
  return read_llama2c(file->bytes(), path);
}

Result<Tokenizer> Tokenizer::read_llama2c(std::span<const std::byte> bytes, const std::string& path) {
  auto malformed = [&](const std::string& what) {
    return Error(ErrorCode::format, path + ": not a llama2.c tokenizer: " + what);
  };
  if (bytes.size() < 4) return malformed("shorter than its 4-byte header");
  std::int32_t max_length;
  std::memcpy(&max_length, bytes.data(), 4);
  if (max_length < 1 || max_length > (1 << 16)) {
    return malformed("max token length " + std::to_string(max_length) + " is out of range");
  }
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::size_t at = 4;
  while (at < bytes.size()) {
    if (bytes.size() - at < 8) return malformed("truncated inside the entry of token " + std::to_string(pieces.size()));
    float score;
    std::int32_t length;
    std::memcpy(&score, bytes.data() + at, 4);
    std::memcpy(&length, bytes.data() + at + 4, 4);
    at += 8;
    if (length < 0 || length > max_length || static_cast<std::size_t>(length) > bytes.size() - at) {
      return malformed("token " + std::to_string(pieces.size()) + " has length " + std::to_string(length) +
                       (length > max_length ? " above the maximum " + std::to_string(max_length) : " past the end"));
    }
    pieces.emplace_back(reinterpret_cast<const char*>(bytes.data() + at), static_cast<std::size_t>(length));
    scores.push_back(score);
    at += static_cast<std::size_t>(length);
  }
  return from_pieces(std::move(pieces), std::move(scores));
}

Status Tokenizer::write_llama2c(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Error(ErrorCode::io, "cannot create " + path + ": " + std::strerror(errno));
  std::int32_t max_length = 1;
  for (const auto& p : pieces_) max_length = std::max(max_length, static_cast<std::int32_t>(p.size()));
  out.write(reinterpret_cast<const char*>(&max_length), 4);
  for (int id = 0; id < vocab_size(); ++id) {
    const std::string& p = pieces_[static_cast<std::size_t>(id)];
    const auto length = static_cast<std::int32_t>(p.size());
    out.write(reinterpret_cast<const char*>(&scores_[static_cast<std::size_t>(id)]), 4);
    out.write(reinterpret_cast<const char*>(&length), 4);
    out.write(p.data(), length);
  }
  out.close();
  if (!out) return Error(ErrorCode::io, "cannot write " + path + ": " + std::strerror(errno));
  return {};
}

bool Tokenizer::is_byte_piece(int id) const { return byte_piece_value(piece(id)) >= 0; }

int Tokenizer::lookup(std::string_view piece) const {
  const auto it = ids_.find(std::string(piece));
  return it == ids_.end() ? -1 : it->second;
}

Result<std::vector<int>> Tokenizer::encode(std::string_view text, const EncodeOptions& options,
                                           EncodeCost* cost) const {
  if ((options.bos && bos_id_ < 0) || (options.eos && eos_id_ < 0)) {
    return Error(ErrorCode::contract, "the vocabulary names no BOS or EOS token");
  }
  std::vector<int> tokens;
  if (options.bos) tokens.push_back(bos_id_);
  bool after_special = true;  // SentencePiece's dummy prefix goes before such text
  for (const Fragment& fragment : partition(text, options.parse_special)) {
    if (fragment.token >= 0) {
      tokens.push_back(fragment.token);
      after_special = true;
      continue;
    }
    const std::string_view part = text.substr(fragment.begin, fragment.length);
    if (kind_ == TokenizerKind::byte_bpe || kind_ == TokenizerKind::piece_bpe) {
      encode_bpe(part, tokens, cost);
    } else if (Status ok = encode_sentencepiece(part, after_special, tokens, cost); !ok) {
      return ok.error();
    }
    after_special = false;
  }
  if (options.eos) tokens.push_back(eos_id_);
  return tokens;
}

Status Tokenizer::encode_sentencepiece(std::string_view text, bool space_prefix, std::vector<int>& tokens,
                                       EncodeCost* cost) const {
  // GGUF vocabularies spell every space as U+2581.
  std::string normalized = add_space_prefix_ && space_prefix ? " " : "";
  normalized += text;
  if (kind_ == TokenizerKind::sentencepiece) normalized = replace_all(normalized, " ", kSpaceMark);
  std::vector<int> part;
  if (Status ok = append_code_points(normalized, part); !ok) return ok;
  merge_by_score(part, cost);
  tokens.insert(tokens.end(), part.begin(), part.end());
  return {};
}

// One token per code point; unknown code points fall back to byte pieces.
Status Tokenizer::append_code_points(std::string_view text, std::vector<int>& tokens) const {
  for (std::size_t i = 0; i < text.size();) {
    std::size_t end = i + 1;
    while (end < text.size() && end - i < 4 && is_utf8_continuation(static_cast<unsigned char>(text[end]))) ++end;
    const std::string_view code_point = text.substr(i, end - i);
    if (const int id = lookup(code_point); id >= 0) {
      tokens.push_back(id);
    } else {
      for (unsigned char byte : code_point) {
        if (byte_ids_[byte] < 0) {
          char name[8];
          std::snprintf(name, sizeof name, "<0x%02X>", byte);
          return Error(ErrorCode::contract, std::string("cannot encode byte ") + name +
                                                ": the vocabulary has neither a piece nor a byte fallback for it");
        }
        tokens.push_back(byte_ids_[byte]);
      }
    }
    i = end;
  }
  return {};
}

// Merges the best-scoring adjacent pair until no pair forms a piece. Ties
// go to the leftmost pair, as in run.c. A priority queue of candidate pairs
// keeps it O(n log n): a merge pushes only the two pairs it makes, and a
// candidate whose symbols changed since it was pushed is dropped when it
// comes up.
void Tokenizer::merge_by_score(std::vector<int>& tokens, EncodeCost* cost) const {
  SymbolList symbols(tokens.size());
  std::priority_queue<ScoredPair> queue;
  std::string joined;
  const auto offer = [&](int left) {
    const int right = symbols.next(left);
    if (right < 0) return;
    joined = piece(tokens[static_cast<std::size_t>(left)]);
    joined += piece(tokens[static_cast<std::size_t>(right)]);
    if (cost != nullptr) ++cost->pair_lookups;
    const int id = lookup(joined);
    // run.c's search starts from a score of -1e10: a piece scored at or
    // below it (or NaN) never wins.
    if (id < 0 || !(scores_[static_cast<std::size_t>(id)] > kNoMergeScore)) return;
    queue.push({scores_[static_cast<std::size_t>(id)], left, right, tokens[static_cast<std::size_t>(left)],
                tokens[static_cast<std::size_t>(right)], id});
  };
  for (int i = 0; i + 1 < static_cast<int>(tokens.size()); ++i) offer(i);
  while (!queue.empty()) {
    const ScoredPair best = queue.top();
    queue.pop();
    if (cost != nullptr) ++cost->queue_pops;
    const auto left = static_cast<std::size_t>(best.left);
    const auto right = static_cast<std::size_t>(best.right);
    if (!symbols.alive(best.left) || symbols.next(best.left) != best.right || tokens[left] != best.left_id ||
        tokens[right] != best.right_id) {
      continue;  // stale: one of its symbols merged since
    }
    tokens[left] = best.id;
    symbols.absorb_next(best.left);
    if (const int before = symbols.previous(best.left); before >= 0) offer(before);
    offer(best.left);
  }
  std::size_t kept = 0;
  for (int i = 0; i >= 0 && !tokens.empty(); i = symbols.next(i)) tokens[kept++] = tokens[static_cast<std::size_t>(i)];
  tokens.resize(kept);
}

int Tokenizer::merge_rank(const std::string& left, const std::string& right) const {
  std::string key = left;
  key.push_back('\0');
  key += right;
  const auto it = merge_ranks_.find(key);
  return it == merge_ranks_.end() ? -1 : it->second;
}

// Merges the adjacent pair of lowest merge rank until no pair has one. Ties
// go to the leftmost pair, as in llama.cpp. The same queue as
// merge_by_score: a symbol is a span of the word, so a candidate is stale
// once either of its symbols is longer than when it was pushed.
void Tokenizer::merge_by_rank(std::vector<std::string>& symbols, EncodeCost* cost) const {
  SymbolList list(symbols.size());
  std::priority_queue<RankedPair> queue;
  const auto offer = [&](int left) {
    const int right = list.next(left);
    if (right < 0) return;
    const std::string& a = symbols[static_cast<std::size_t>(left)];
    const std::string& b = symbols[static_cast<std::size_t>(right)];
    if (cost != nullptr) ++cost->pair_lookups;
    if (const int rank = merge_rank(a, b); rank >= 0) queue.push({rank, left, right, a.size(), b.size()});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) offer(i);
  while (!queue.empty()) {
    const RankedPair best = queue.top();
    queue.pop();
    if (cost != nullptr) ++cost->queue_pops;
    std::string& a = symbols[static_cast<std::size_t>(best.left)];
    std::string& b = symbols[static_cast<std::size_t>(best.right)];
    if (!list.alive(best.left) || list.next(best.left) != best.right || a.size() != best.left_size ||
        b.size() != best.right_size) {
      continue;
    }
    a += b;
    b.clear();
    list.absorb_next(best.left);
    if (const int before = list.previous(best.left); before >= 0) offer(before);
    offer(best.left);
  }
  std::size_t kept = 0;
  for (int i = 0; i >= 0 && !symbols.empty(); i = list.next(i)) {
    if (kept != static_cast<std::size_t>(i)) symbols[kept] = std::move(symbols[static_cast<std::size_t>(i)]);
    ++kept;
  }
  symbols.resize(kept);
}

void Tokenizer::encode_bpe(std::string_view text, std::vector<int>& tokens, EncodeCost* cost) const {
  const std::string escaped = pre_.escape_whitespace() ? replace_all(text, " ", kSpaceMark) : std::string(text);
  std::uint64_t steps = 0;
  for (const std::string& word : pre_.words(escaped, steps)) encode_bpe_word(word, tokens, cost);
  if (cost != nullptr) cost->pattern_steps += steps;
}

// llama.cpp's llm_tokenizer_bpe_session for one word.
void Tokenizer::encode_bpe_word(const std::string& word, std::vector<int>& tokens, EncodeCost* cost) const {
  // Llama 3 takes a word that is a token as it is; Gemma 4 a run of
  // newlines that is one.
  const bool newlines = kind_ == TokenizerKind::piece_bpe && word.find_first_not_of('\n') == std::string::npos;
  if (pre_.ignore_merges() || newlines) {
    if (const int id = lookup(word); id >= 0) {
      tokens.push_back(id);
      return;
    }
  }
  std::vector<std::string> symbols;
  for (std::size_t at = 0; at < word.size();) {
    const std::size_t length = unicode::decode_utf8(word, at).length;
    symbols.push_back(word.substr(at, length));
    at += length;
  }
  merge_by_rank(symbols, cost);
  for (const std::string& symbol : symbols) {
    if (const int id = lookup(symbol); id >= 0) {
      tokens.push_back(id);
    } else {
      append_symbol_bytes(symbol, tokens);
    }
  }
}

// A symbol with no token becomes the tokens of its bytes: the one-byte
// piece (byte-level) or `<0xNN>` (Gemma 4); a byte with neither is
// dropped, as llama.cpp drops it.
void Tokenizer::append_symbol_bytes(const std::string& symbol, std::vector<int>& tokens) const {
  for (char c : symbol) {
    const int id = pre_.byte_encode() ? lookup(std::string(1, c)) : byte_ids_[static_cast<unsigned char>(c)];
    if (id >= 0) tokens.push_back(id);
  }
}

std::string Tokenizer::decode(int previous, int token) const {
  switch (kind_) {
    case TokenizerKind::byte_bpe: return decode_bpe(token);
    case TokenizerKind::piece_bpe: return decode_pieces(token);
    default: return decode_sentencepiece(previous, token);
  }
}

std::string Tokenizer::decode_pieces(int token) const {
  if (const int byte = byte_piece_value(piece(token)); byte >= 0) return std::string(1, static_cast<char>(byte));
  return replace_all(piece(token), kSpaceMark, " ");
}

std::string Tokenizer::decode_sentencepiece(int previous, int token) const {
  std::string text = piece(token);
  if (kind_ == TokenizerKind::sentencepiece) text = replace_all(text, kSpaceMark, " ");
  if (previous == bos_id_ && !text.empty() && text.front() == ' ') text.erase(0, 1);
  std::string out;
  if (const int byte = byte_piece_value(text); byte >= 0) {
    out.push_back(static_cast<char>(byte));
  } else {
    out = std::move(text);
  }
  if (out.size() == 1) {
    const auto c = static_cast<unsigned char>(out[0]);
    if (!(std::isprint(c) || std::isspace(c))) return {};
  }
  return out;
}

// Each character of a byte-level piece stands for one byte; user-defined
// tokens are their text, and characters outside GPT-2's table (in other
// added tokens) are kept as they are.
std::string Tokenizer::decode_bpe(int token) const {
  const std::string& text = piece(token);
  if ((attributes(token) & kTokenUserDefined) != 0) return text;
  std::string out;
  for (std::size_t at = 0; at < text.size();) {
    const unicode::CodePoint cp = unicode::decode_utf8(text, at);
    const int byte = cp.valid ? unicode::unicode_to_byte(cp.value) : -1;
    if (byte >= 0) {
      out.push_back(static_cast<char>(byte));
    } else {
      out.append(text, at, cp.length);
    }
    at += cp.length;
  }
  return out;
}

}  // namespace accord
