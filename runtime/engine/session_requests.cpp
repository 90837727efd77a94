#include "runtime/engine/session_requests.hpp"

#include "runtime/engine/transaction_driver.hpp"
#include "runtime/rank/prompt_cache_shard.hpp"

namespace accord {

TransactionRequest step_request(std::span<const int> tokens, bool all_rows, int draft_tokens) {
  TransactionRequest request;
  request.kind = TransactionKind::forward_step;
  request.tokens.assign(tokens.begin(), tokens.end());
  request.all_rows = all_rows;
  request.capture_prediction_target = draft_tokens >= 0;
  request.draft_tokens = std::max(draft_tokens, 0);
  return request;
}

TransactionRequest rollback_request(std::int32_t position, std::uint64_t state_epoch, std::uint64_t reset_epoch) {
  TransactionRequest request;
  request.kind = TransactionKind::rollback;
  request.position = position;
  request.state_epoch = state_epoch;
  request.reset_epoch = reset_epoch;
  return request;
}

TransactionRequest cache_request(TransactionKind kind, const std::filesystem::path& root,
                                 const PromptCacheDescriptor& descriptor, std::span<const int> prefix,
                                 const std::string& prepared_input) {
  TransactionRequest request;
  request.kind = kind;
  request.tokens.assign(prefix.begin(), prefix.end());
  request.cache_root = root.string();
  request.cache_name = descriptor.name;
  request.cache_namespace = descriptor.cache_namespace;
  request.prepared_input = prepared_input;
  if (kind == TransactionKind::prompt_cache_save) request.save_id = new_save_id();
  return request;
}

PromptCacheSaveResult save_result(const ModelConfig& config, const TransactionRequest& request,
                                  const TransactionReply& reply) {
  const auto rows = static_cast<std::uint64_t>(request.tokens.size());
  // Keys and values of every unit, over all ranks' shards.
  const std::uint64_t shard_bytes = rows * static_cast<std::uint64_t>(config.kv_dim()) * sizeof(float) * 2 *
                                    static_cast<std::uint64_t>(config.n_layers);
  return {reply.epoch, generation_name(reply.epoch, request.save_id), static_cast<int>(rows), shard_bytes};
}

Result<TransactionReply> settle(TransactionRecord& record, TransactionKind kind, TransactionReply reply) {
  if (reply.outcome == TransactionOutcome::committed) {
    if (kind == TransactionKind::end_chain) return reply;  // it ran no transaction
    record.committed(reply.epoch);
    if (kind == TransactionKind::rollback) ++record.restoration_generation;
    return reply;
  }
  Error error = reply_error(reply);
  if (reply.outcome == TransactionOutcome::aborted) {
    record.aborted(reply.epoch, error.message(),
                   kind != TransactionKind::checkpoint && kind != TransactionKind::prompt_cache_save);
  } else if (reply.outcome == TransactionOutcome::poisoned) {
    record.poisoned(reply.epoch, error.message());
  }  // refused: nothing began
  return error;
}

}  // namespace accord
