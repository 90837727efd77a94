#include "runtime/generate/drafter.hpp"

#include <algorithm>
#include <string>

#include "runtime/text/sampler.hpp"

namespace accord {

Result<std::vector<int>> PromptLookupDrafter::propose(std::span<const int> context, int max_tokens) {
  const int length = static_cast<int>(context.size());
  for (int n = std::min(max_ngram_, length - 1); n >= 1; --n) {
    const auto suffix = context.last(static_cast<std::size_t>(n));
    // The latest earlier occurrence: it starts at `start`, before the suffix itself.
    for (int start = length - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), context.begin() + start)) continue;
      // Copies what followed it, reading on into the draft itself once
      // past the context's end (as LZ77 copies overlap), so that a loop of
      // any period is drafted to its full length.
      std::vector<int> draft;
      for (int i = start + n; static_cast<int>(draft.size()) < max_tokens; ++i) {
        const auto at = static_cast<std::size_t>(i < length ? i : i - length);
        draft.push_back(i < length ? context[at] : draft[at]);
      }
      return draft;
    }
  }
  return std::vector<int>{};
}

ModelDrafter::ModelDrafter(const Model& model, int threads) : session_(model, SessionOptions{threads, {}}) {}

Status ModelDrafter::follow(std::span<const int> tokens) {
  const auto held = session_.tokens();
  const bool extends = held.size() <= tokens.size() && std::equal(held.begin(), held.end(), tokens.begin());
  if (!extends) {
    if (Status s = session_.reset(); !s) return s;
  }
  const auto rest = tokens.subspan(session_.tokens().size());
  if (rest.empty()) return {};
  auto step = session_.prefill(rest);
  if (!step) return step.error();
  return {};
}

Result<std::vector<int>> ModelDrafter::propose(std::span<const int> context, int max_tokens) {
  // Decodes from position context.size() - 1 on, within the draft model's context.
  const int room = session_.model().config().seq_len - static_cast<int>(context.size()) + 1;
  std::vector<int> draft;
  if (context.empty() || room < 1) return draft;  // past the draft model's context: no guess
  if (Status s = follow(context.first(context.size() - 1)); !s) return s.error();
  auto before = session_.checkpoint();
  if (!before) return before.error();
  int token = context.back();
  for (int i = 0; i < std::min(max_tokens, room); ++i) {
    auto step = session_.decode(token);
    if (!step) return step.error();
    token = argmax(step->logits);
    draft.push_back(token);
  }
  if (Status s = session_.rollback(*before); !s) return s.error();
  return draft;
}

Status check_draft_model(const ModelConfig& draft, const ModelConfig& target) {
  if (draft.vocab_size != target.vocab_size) {
    return Error(ErrorCode::architecture, "the draft model's vocabulary has " + std::to_string(draft.vocab_size) +
                                              " tokens but the target's has " + std::to_string(target.vocab_size));
  }
  return {};
}

}  // namespace accord
