#include "runtime/engine/session_requests.hpp"

#include "runtime/engine/transaction_driver.hpp"
#include "runtime/rank/prompt_cache_shard.hpp"

namespace accord {

TransactionRequest step_request(std::span<const int> tokens, bool all_rows, int draft_tokens) {
  ForwardStepRequest step;
  step.tokens.assign(tokens.begin(), tokens.end());
  step.all_rows = all_rows;
  if (draft_tokens >= 0) step.prediction_target = DraftTokens{draft_tokens};
  return {std::move(step)};
}

TransactionRequest rollback_request(std::int32_t position, std::uint64_t state_epoch, std::uint64_t reset_epoch) {
  return {RollbackRequest{position, state_epoch, reset_epoch}};
}

TransactionRequest cache_request(TransactionKind kind, const std::filesystem::path& root,
                                 const PromptCacheDescriptor& descriptor, std::span<const int> prefix,
                                 const std::string& prepared_input) {
  PromptCacheArguments arguments{root.string(),
                                 descriptor.name,
                                 descriptor.cache_namespace,
                                 prepared_input,
                                 "",
                                 std::vector<std::int32_t>(prefix.begin(), prefix.end())};
  if (kind == TransactionKind::prompt_cache_load) return {PromptCacheLoadRequest{std::move(arguments)}};
  arguments.save_id = new_save_id();
  return {PromptCacheSaveRequest{std::move(arguments)}};
}

PromptCacheSaveResult save_result(const ModelConfig& config, const TransactionRequest& request,
                                  const TransactionReply& reply) {
  const PromptCacheArguments& saved = std::get<PromptCacheSaveRequest>(request.operation).arguments;
  const auto rows = static_cast<std::uint64_t>(saved.prefix.size());
  // Keys and values of every unit, over all ranks' shards.
  const std::uint64_t shard_bytes = rows * static_cast<std::uint64_t>(config.kv_dim()) * sizeof(float) * 2 *
                                    static_cast<std::uint64_t>(config.n_layers);
  return {reply.epoch, generation_name(reply.epoch, saved.save_id), static_cast<int>(rows), shard_bytes};
}

Result<TransactionReply> settle(TransactionRecord& record, TransactionKind kind, TransactionReply reply) {
  if (reply.outcome == TransactionOutcome::committed) {
    if (kind == TransactionKind::end_chain) return reply;  // it ran no transaction
    record.committed(reply.epoch);
    if (kind == TransactionKind::rollback || kind == TransactionKind::snapshot_restore) {
      ++record.restoration_generation;
    }
    return reply;
  }
  Error error = reply_error(reply);
  if (reply.outcome == TransactionOutcome::aborted) {
    record.aborted(reply.epoch, error.message(),
                   kind != TransactionKind::checkpoint && kind != TransactionKind::prompt_cache_save &&
                       kind != TransactionKind::snapshot);
  } else if (reply.outcome == TransactionOutcome::poisoned) {
    record.poisoned(reply.epoch, error.message());
  }  // refused: nothing began
  return error;
}

}  // namespace accord
