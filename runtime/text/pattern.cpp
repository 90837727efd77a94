#include "runtime/text/pattern.hpp"

#include <unicode/uchar.h>

#include <array>
#include <deque>
#include <string>
#include <utility>

#include "runtime/base/utf8.hpp"

namespace accord::unicode {

enum class Op : std::uint8_t { set, split, jump, end, look, match };

// One step of the compiled pattern. split tries x first, then y; look runs
// the lookahead that starts at x and continues at the next instruction when
// its outcome is not `negate`.
struct Pattern::Instruction {
  Op op;
  int x = 0;
  int y = 0;
  bool negate = false;
};

struct Pattern::Set {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> ranges;  // inclusive
  std::uint8_t classes = 0;
  bool negated = false;

  bool matches(const MatchChar& c) const {
    bool in = (c.classes & classes) != 0;
    for (const auto& [low, high] : ranges) in = in || (c.value >= low && c.value <= high);
    return in != negated;
  }
};

namespace {

std::uint8_t category_class(std::uint32_t code_point) {
  switch (u_charType(static_cast<UChar32>(code_point))) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER: return kLetter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER: return kNumber;
    case U_CONNECTOR_PUNCTUATION:
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
    case U_OTHER_PUNCTUATION: return kPunctuation;
    case U_NON_SPACING_MARK:
    case U_ENCLOSING_MARK:
    case U_COMBINING_SPACING_MARK: return kMark;
    case U_MATH_SYMBOL:
    case U_CURRENCY_SYMBOL:
    case U_MODIFIER_SYMBOL:
    case U_OTHER_SYMBOL: return kSymbol;
    default: return 0;
  }
}

// One node of the parsed expression: a class, a group of alternatives, a
// lookahead or `$`, repeated min..max times (max -1: unbounded).
struct Node {
  enum Kind { set, group, look, end } kind = set;
  int set_index = 0;
  std::vector<std::vector<Node>> alternatives;
  bool negate = false;
  int min = 1;
  int max = 1;
};

class Parser {
 public:
  explicit Parser(std::string_view text) {
    for (std::size_t at = 0; at < text.size();) {
      const CodePoint cp = decode_utf8(text, at);
      chars_.push_back(cp.value);
      at += cp.length;
    }
  }

  Result<std::vector<std::vector<Node>>> parse(std::vector<Pattern::Set>& sets) {
    sets_ = &sets;
    auto alternatives = parse_alternatives();
    if (!error_.empty()) return Error(ErrorCode::format, error_);
    if (at_ < chars_.size()) return Error(ErrorCode::format, "unbalanced ')'");
    return alternatives;
  }

 private:
  bool more() const { return at_ < chars_.size() && error_.empty(); }
  std::uint32_t peek(std::size_t ahead = 0) const {
    return at_ + ahead < chars_.size() ? chars_[at_ + ahead] : 0xFFFFFFFF;
  }
  void fail(const std::string& what) {
    if (error_.empty()) error_ = what;
  }

  std::vector<std::vector<Node>> parse_alternatives() {
    std::vector<std::vector<Node>> alternatives(1);
    while (more() && peek() != ')') {
      if (peek() == '|') {
        ++at_;
        alternatives.emplace_back();
        continue;
      }
      Node node = parse_atom();
      parse_quantifier(node);
      alternatives.back().push_back(std::move(node));
    }
    return alternatives;
  }

  Node parse_atom() {
    Node node;
    const std::uint32_t c = chars_[at_++];
    if (c == '(') return parse_group();
    if (c == '$') {
      node.kind = Node::end;
    } else if (c == '[') {
      node.set_index = add_set(parse_class());
    } else if (c == '\\') {
      node.set_index = add_set(parse_escape(false));
    } else if (c == ')' || c == '*' || c == '+' || c == '?' || c == '{' || c == '^' || c == '.') {
      fail("unsupported '" + std::string(1, static_cast<char>(c)) + "'");
    } else {
      node.set_index = add_set(literal(c));
    }
    return node;
  }

  Node parse_group() {
    Node node;
    node.kind = Node::group;
    if (peek() == '?') {
      const std::uint32_t kind = peek(1);
      at_ += 2;
      if (kind == '=' || kind == '!') {
        node.kind = Node::look;
        node.negate = kind == '!';
      } else if (kind != ':') {
        fail("unsupported group '(?" + std::string(1, static_cast<char>(kind)) + "'");
      }
    }
    node.alternatives = parse_alternatives();
    if (peek() != ')') fail("missing ')'");
    ++at_;
    return node;
  }

  void parse_quantifier(Node& node) {
    const std::uint32_t c = peek();
    if (c == '?' || c == '*' || c == '+') {
      node.min = c == '+' ? 1 : 0;
      node.max = c == '?' ? 1 : -1;
      ++at_;
    } else if (c == '{') {
      ++at_;
      node.min = node.max = read_number();
      if (peek() == ',') {
        ++at_;
        node.max = peek() == '}' ? -1 : read_number();
      }
      if (peek() != '}') fail("malformed '{n,m}'");
      ++at_;
    } else {
      return;
    }
    const std::uint32_t after = peek();
    if (after == '?' || after == '+' || after == '*') fail("lazy or possessive quantifiers are unsupported");
  }

  int read_number() {
    int n = 0;
    bool any = false;
    while (peek() >= '0' && peek() <= '9') {
      n = n * 10 + static_cast<int>(chars_[at_++] - '0');
      any = true;
    }
    if (!any) fail("malformed '{n,m}'");
    return n;
  }

  static Pattern::Set literal(std::uint32_t c) { return {{{c, c}}, 0, false}; }

  // After a backslash: a class escape, or the escaped character itself.
  Pattern::Set parse_escape(bool in_class) {
    if (!more()) {
      fail("trailing '\\'");
      return {};
    }
    const std::uint32_t c = chars_[at_++];
    switch (c) {
      case 's': return {{}, kWhitespace, false};
      case 'S':
        if (in_class) fail("'\\S' inside a class is unsupported");
        return {{}, kWhitespace, true};
      case 'd': return {{{'0', '9'}}, 0, false};
      case 'r': return literal('\r');
      case 'n': return literal('\n');
      case 't': return literal('\t');
      case 'u': return literal(read_hex());
      case 'p': return {{}, parse_property(), false};
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
          fail("unsupported escape '\\" + std::string(1, static_cast<char>(c)) + "'");
        }
        return literal(c);
    }
  }

  std::uint8_t parse_property() {
    std::string name;
    if (peek() != '{') fail("malformed '\\p'");
    for (++at_; more() && peek() != '}';) name.push_back(static_cast<char>(chars_[at_++]));
    ++at_;
    static const std::array<std::pair<std::string_view, std::uint8_t>, 10> kProperties = {{
        {"L", kLetter},
        {"Lu", kLetter},
        {"Ll", kLetter},
        {"Lt", kLetter},
        {"Lm", kLetter},
        {"Lo", kLetter},
        {"N", kNumber},
        {"P", kPunctuation},
        {"M", kMark},
        {"S", kSymbol},
    }};
    for (const auto& [property, cls] : kProperties) {
      if (name == property) return cls;
    }
    fail("unsupported property '\\p{" + name + "}'");
    return 0;
  }

  // After '[': items up to the closing ']'.
  Pattern::Set parse_class() {
    Pattern::Set set;
    if (peek() == '^') {
      set.negated = true;
      ++at_;
    }
    while (more() && peek() != ']') {
      const Pattern::Set item = class_item();
      set.classes |= item.classes;
      if (item.ranges.size() == 1 && peek() == '-' && peek(1) != ']' && peek(1) != 0xFFFFFFFF) {
        ++at_;
        const Pattern::Set high = class_item();
        if (high.ranges.size() != 1 || high.ranges[0].first < item.ranges[0].first) fail("malformed range in a class");
        if (!high.ranges.empty()) set.ranges.emplace_back(item.ranges[0].first, high.ranges[0].second);
        continue;
      }
      set.ranges.insert(set.ranges.end(), item.ranges.begin(), item.ranges.end());
    }
    if (peek() != ']') fail("missing ']'");
    ++at_;
    return set;
  }

  // A code point or a class escape inside '[..]'.
  Pattern::Set class_item() {
    const std::uint32_t c = chars_[at_++];
    return c == '\\' ? parse_escape(true) : literal(c);
  }

  // After "\u": four hex digits.
  std::uint32_t read_hex() {
    std::uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      const std::uint32_t c = peek();
      const int digit = c >= '0' && c <= '9'   ? static_cast<int>(c - '0')
                        : c >= 'A' && c <= 'F' ? static_cast<int>(c - 'A' + 10)
                        : c >= 'a' && c <= 'f' ? static_cast<int>(c - 'a' + 10)
                                               : -1;
      if (digit < 0) {
        fail("malformed '\\u'");
        return 0;
      }
      value = value * 16 + static_cast<std::uint32_t>(digit);
      ++at_;
    }
    return value;
  }

  int add_set(Pattern::Set set) {
    sets_->push_back(std::move(set));
    return static_cast<int>(sets_->size()) - 1;
  }

  std::vector<std::uint32_t> chars_;
  std::size_t at_ = 0;
  std::string error_;
  std::vector<Pattern::Set>* sets_ = nullptr;
};

// Thompson's construction into Pattern::Instruction.
class Compiler {
 public:
  std::vector<Pattern::Instruction> program;

  void alternatives(const std::vector<std::vector<Node>>& alternatives) {
    std::vector<int> to_end;
    for (std::size_t i = 0; i < alternatives.size(); ++i) {
      int split = -1;
      if (i + 1 < alternatives.size()) split = emit({Op::split});
      for (const Node& node : alternatives[i]) repeated(node);
      if (split < 0) break;
      to_end.push_back(emit({Op::jump}));
      program[static_cast<std::size_t>(split)].x = split + 1;
      program[static_cast<std::size_t>(split)].y = here();
    }
    for (int jump : to_end) program[static_cast<std::size_t>(jump)].x = here();
  }

 private:
  int here() const { return static_cast<int>(program.size()); }
  int emit(Pattern::Instruction instruction) {
    program.push_back(instruction);
    return here() - 1;
  }

  void repeated(const Node& node) {
    for (int i = 0; i < node.min; ++i) once(node);
    if (node.max < 0) {
      const int split = emit({Op::split});
      once(node);
      emit({Op::jump, split});
      program[static_cast<std::size_t>(split)].x = split + 1;
      program[static_cast<std::size_t>(split)].y = here();
      return;
    }
    std::vector<int> skips;
    for (int i = node.min; i < node.max; ++i) {
      skips.push_back(emit({Op::split}));
      once(node);
    }
    for (int split : skips) {
      program[static_cast<std::size_t>(split)].x = split + 1;
      program[static_cast<std::size_t>(split)].y = here();
    }
  }

  void once(const Node& node) {
    switch (node.kind) {
      case Node::set: emit({Op::set, node.set_index}); break;
      case Node::end: emit({Op::end}); break;
      case Node::group: alternatives(node.alternatives); break;
      case Node::look: {
        // look, jump over the lookahead's body, body, match
        const int look = emit({Op::look, 0, 0, node.negate});
        const int jump = emit({Op::jump});
        program[static_cast<std::size_t>(look)].x = here();
        alternatives(node.alternatives);
        emit({Op::match});
        program[static_cast<std::size_t>(jump)].x = here();
        break;
      }
    }
  }
};

class BitSet {
 public:
  static bool test(const std::vector<std::uint64_t>& bits, std::size_t i) { return (bits[i / 64] >> (i % 64)) & 1U; }
  static void set(std::vector<std::uint64_t>& bits, std::size_t i) { bits[i / 64] |= std::uint64_t{1} << (i % 64); }
  static void clear(std::vector<std::uint64_t>& bits, std::size_t i) {
    bits[i / 64] &= ~(std::uint64_t{1} << (i % 64));
  }
};

}  // namespace

MatchChar match_char(std::uint32_t code_point) {
  const bool space = code_point < 128 ? (code_point == ' ' || (code_point >= '\t' && code_point <= '\r'))
                                      : u_isUWhiteSpace(static_cast<UChar32>(code_point)) != 0;
  if (space) return {code_point < 128 ? code_point : 0x0B, kWhitespace};
  return {code_point, category_class(code_point)};
}

Result<Pattern> Pattern::compile(std::string_view expression) {
  auto sets = std::make_shared<std::vector<Set>>();
  auto parsed = Parser(expression).parse(*sets);
  if (!parsed) {
    return Error(ErrorCode::format,
                 "pre-tokenizer pattern '" + std::string(expression) + "': " + parsed.error().message());
  }
  Compiler compiler;
  compiler.alternatives(*parsed);
  compiler.program.push_back({Op::match});
  Pattern pattern;
  pattern.program_ = std::make_shared<const std::vector<Instruction>>(std::move(compiler.program));
  pattern.sets_ = std::move(sets);
  return pattern;
}

// Backtracking from (pc, pos) with an explicit stack of alternatives. With
// `visited`, a state tried before fails at once: it failed then, or the
// search would have ended. Lookaheads (a class or two in practice) run
// without it.
bool Pattern::match_here(std::span<const MatchChar> text, int start_pc, std::size_t start_pos,
                         std::vector<std::uint64_t>* visited, std::int64_t& end, std::uint64_t& steps,
                         std::size_t depth) const {
  const auto& program = *program_;
  const std::size_t columns = text.size() + 1;
  // One stack per lookahead depth, kept between calls: a search starts at
  // every position, and allocating there would cost more than matching.
  thread_local std::deque<std::vector<std::pair<int, std::size_t>>> stacks;
  if (stacks.size() <= depth) stacks.resize(depth + 1);
  std::vector<std::pair<int, std::size_t>>& stack = stacks[depth];
  stack.assign(1, {start_pc, start_pos});
  while (!stack.empty()) {
    auto [pc, pos] = stack.back();
    stack.pop_back();
    for (bool alive = true; alive;) {
      ++steps;
      if (visited != nullptr) {
        const std::size_t bit = static_cast<std::size_t>(pc) * columns + pos;
        if (BitSet::test(*visited, bit)) break;
        BitSet::set(*visited, bit);
      }
      const Instruction& in = program[static_cast<std::size_t>(pc)];
      switch (in.op) {
        case Op::set:
          alive = pos < text.size() && (*sets_)[static_cast<std::size_t>(in.x)].matches(text[pos]);
          ++pc;
          ++pos;
          break;
        case Op::split:
          stack.emplace_back(in.y, pos);
          pc = in.x;
          break;
        case Op::jump: pc = in.x; break;
        case Op::end:
          alive = pos == text.size();
          ++pc;
          break;
        case Op::look: {
          std::int64_t ignored = 0;
          alive = match_here(text, in.x, pos, nullptr, ignored, steps, depth + 1) != in.negate;
          ++pc;
          break;
        }
        case Op::match: end = static_cast<std::int64_t>(pos); return true;
      }
    }
  }
  return false;
}

std::int64_t Pattern::search(std::span<const MatchChar> text, std::size_t from, std::size_t& start,
                             std::vector<std::uint64_t>& visited, std::uint64_t& steps) const {
  for (start = from; start < text.size(); ++start) {
    std::int64_t end = -1;
    if (match_here(text, 0, start, &visited, end, steps, 0)) return end;
  }
  return -1;
}

void Pattern::split(std::span<const MatchChar> text, std::vector<std::size_t>& lengths, std::uint64_t& steps) const {
  const std::size_t columns = text.size() + 1;
  thread_local std::vector<std::uint64_t> visited;
  visited.assign((program_->size() * columns + 63) / 64, 0);
  std::size_t piece_start = 0;
  for (std::size_t from = 0; from < text.size();) {
    std::size_t start = 0;
    const std::int64_t end = search(text, from, start, visited, steps);
    if (end < 0) break;
    const auto match_end = static_cast<std::size_t>(end);
    // The states at the match's end may lie on its path, not only on
    // failed ones: the next search starts there afresh.
    for (std::size_t pc = 0; pc < program_->size(); ++pc) BitSet::clear(visited, pc * columns + match_end);
    if (match_end == start) {  // an empty match (none of llama.cpp's patterns has one) splits nothing
      from = start + 1;
      continue;
    }
    if (start > piece_start) lengths.push_back(start - piece_start);
    lengths.push_back(match_end - start);
    piece_start = from = match_end;
  }
  if (piece_start < text.size()) lengths.push_back(text.size() - piece_start);
}

}  // namespace accord::unicode
