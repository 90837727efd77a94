// The requests a session makes of its engine, whatever the transport, and
// what their replies give back: the one-rank Session (direct engine) and
// the distributed session (CAF transports) build them here. CAF-free.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

#include "messages/session_api.hpp"
#include "runtime/base/error.hpp"
#include "runtime/model/model.hpp"
#include "runtime/rank/prompt_cache.hpp"
#include "runtime/rank/transaction_record.hpp"

namespace accord {

// A forward step over `tokens`: the logits of every row or of the last;
// with `draft_tokens` >= 0 the prediction-target phases verify that many
// last tokens as a draft.
TransactionRequest step_request(std::span<const int> tokens, bool all_rows, int draft_tokens = -1);

TransactionRequest rollback_request(std::int32_t position, std::uint64_t state_epoch, std::uint64_t reset_epoch);

// A prompt-cache save (with a fresh save id) or load of `prefix`.
TransactionRequest cache_request(TransactionKind kind, const std::filesystem::path& root,
                                 const PromptCacheDescriptor& descriptor, std::span<const int> prefix,
                                 const std::string& prepared_input);

// What a committed save of `request` reports.
PromptCacheSaveResult save_result(const ModelConfig& config, const TransactionRequest& request,
                                  const TransactionReply& reply);

// Records how `reply` ended a transaction of `kind` in `record`, and
// returns the reply when it committed, its Error (reply_error) when not.
// An abort restored every rank; that counts as a restoration where the
// transaction could change the state (a checkpoint or a save cannot), and
// so does a committed rollback.
Result<TransactionReply> settle(TransactionRecord& record, TransactionKind kind, TransactionReply reply);

}  // namespace accord
