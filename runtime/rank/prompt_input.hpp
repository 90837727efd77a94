// What produced a session's committed prompt: its tokens and, when they
// came from a prepared input (the _for_input prompt-cache operations), that
// input's identity. Shared by the single-rank Session and the distributed
// session, which keep the record beside their state.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "runtime/base/error.hpp"

namespace accord {

// The tokens below the position and, when they came from a prepared input,
// its identity and the number of tokens it covers.
struct PromptInputIdentity {
  std::string prepared_input;
  int prepared_token_count = 0;
  int token_count = 0;
  std::string tokens_sha256;
  bool operator==(const PromptInputIdentity&) const = default;
};

// The prepared input behind the first tokens of the state, kept only while
// the state still holds them. Copyable, so a transaction can put it back.
class PreparedInputRecord {
 public:
  // A load for `identity` committed its first `token_count` tokens.
  void set(const std::string& identity, int token_count);
  void clear() { prepared_.reset(); }
  // The position moved back to `position`: a record past it is dropped.
  void keep_within(int position);
  // A complete checkpoint's prompt was restored.
  void restore(const std::optional<PromptInputIdentity>& prompt);

  // The identity of the committed `tokens`; none when the state is empty.
  std::optional<PromptInputIdentity> describe(std::span<const int> tokens) const;

 private:
  struct Prepared {
    std::string identity;
    int token_count = 0;  // the tokens it produced, from position 0
  };
  std::optional<Prepared> prepared_;
};

// The _for_input calls need an identity to record.
Status check_prepared_input_named(const std::string& prepared_input);

// A complete checkpoint's prompt identity must cover exactly its state.
Status check_prompt_matches_position(const std::optional<PromptInputIdentity>& prompt, int position);

}  // namespace accord
