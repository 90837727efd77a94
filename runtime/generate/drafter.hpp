// Speculative decoding's drafters: cheap guesses at the tokens that follow
// a context. The target verifies a guess in one prediction-target step
// (runtime/rank/prediction_target.hpp) and keeps only what greedy
// decoding would have produced, so a drafter decides the speed of
// generation, never its tokens.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/model/model.hpp"
#include "runtime/session/session.hpp"

namespace accord {

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to max_tokens tokens guessed to follow `context` (every token of
  // the generation so far; the last is the one the target runs next).
  // Fewer, or none, when it has no guess.
  virtual Result<std::vector<int>> propose(std::span<const int> context, int max_tokens) = 0;
};

// Prompt lookup: finds the latest earlier place where the context's last
// n tokens occurred (the longest n from max_ngram down to 1 that occurs)
// and proposes the tokens that followed them there, max_tokens of them:
// where the context ends first, the copy goes on from its own start, so a
// repeating loop is proposed in full. No model: it pays off where text
// repeats itself, as small models' greedy text does.
class PromptLookupDrafter final : public Drafter {
 public:
  explicit PromptLookupDrafter(int max_ngram = 3) : max_ngram_(max_ngram) {}
  Result<std::vector<int>> propose(std::span<const int> context, int max_tokens) override;

 private:
  int max_ngram_;
};

// A smaller model with the target's vocabulary, decoding greedily on a
// single-rank session of its own. Between proposals the session holds the
// context but its last token; a proposal checkpoints there, decodes
// max_tokens tokens and rolls back, and the next one prefills what the
// target accepted meanwhile.
class ModelDrafter final : public Drafter {
 public:
  // `model` must outlive the drafter.
  ModelDrafter(const Model& model, int threads);
  Result<std::vector<int>> propose(std::span<const int> context, int max_tokens) override;

 private:
  // Brings the session to hold exactly `tokens`.
  Status follow(std::span<const int> tokens);

  Session session_;
};

// Checks that a draft model can propose tokens for `target`: the same vocabulary.
Status check_draft_model(const ModelConfig& draft, const ModelConfig& target);

}  // namespace accord
