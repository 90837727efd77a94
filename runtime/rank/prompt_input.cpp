#include "runtime/rank/prompt_input.hpp"

#include "runtime/io/digest.hpp"

namespace accord {

void PreparedInputRecord::set(const std::string& identity, int token_count) {
  prepared_ = Prepared{identity, token_count};
}

void PreparedInputRecord::keep_within(int position) {
  if (prepared_ && prepared_->token_count > position) prepared_.reset();
}

void PreparedInputRecord::restore(const std::optional<PromptInputIdentity>& prompt) {
  prepared_.reset();
  if (prompt && !prompt->prepared_input.empty()) set(prompt->prepared_input, prompt->prepared_token_count);
}

std::optional<PromptInputIdentity> PreparedInputRecord::describe(std::span<const int> tokens) const {
  if (tokens.empty()) return std::nullopt;
  PromptInputIdentity id;
  if (prepared_) {
    id.prepared_input = prepared_->identity;
    id.prepared_token_count = prepared_->token_count;
  }
  id.token_count = static_cast<int>(tokens.size());
  id.tokens_sha256 = token_ids_sha256(tokens);
  return id;
}

Status check_prepared_input_named(const std::string& prepared_input) {
  if (prepared_input.empty()) {
    return std::move(Error(ErrorCode::contract, "the prepared input identity is empty").mark_before_state_mutation());
  }
  return {};
}

Status check_prompt_matches_position(const std::optional<PromptInputIdentity>& prompt, int position) {
  if (prompt && prompt->token_count != position) {
    return std::move(Error(ErrorCode::contract, "the checkpoint's prompt identity does not match its state")
                         .mark_before_state_mutation());
  }
  return {};
}

}  // namespace accord
