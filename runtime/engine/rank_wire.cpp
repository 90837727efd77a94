#include "runtime/engine/rank_wire.hpp"

#include "runtime/engine/transaction_driver.hpp"

namespace accord {

Error malformed(const std::string& what) { return Error(ErrorCode::contract, "malformed " + what + " arguments"); }

PromptCacheRequest to_request(const PromptCacheArguments& a) {
  return {a.root, {a.descriptor_name, a.descriptor_namespace}, a.prefix, a.prepared_input};
}

WireTensor to_wire(RowBlock block) { return {{block.rows, block.width}, std::move(block.data)}; }

RowBlock from_wire(WireTensor tensor) {
  if (tensor.shape.size() != 2) return {};
  return {static_cast<int>(tensor.shape[0]), static_cast<int>(tensor.shape[1]), std::move(tensor.data)};
}

Result<SamplingResult> sample_on(RankWorker& worker, const SamplingArguments& arguments) {
  const SamplerOptions options{arguments.temperature, arguments.top_p, 0};
  auto sample = worker.sample(options, arguments.rng_state, arguments.stop_tokens);
  if (!sample) return sample.error();
  SamplingResult sampled;
  sampled.token = sample->sampled.token;
  sampled.stop = sample->sampled.stop;
  sampled.rng_state = sample->rng_state;
  return sampled;
}

Result<PredictionTargetHidden> published_capture(const RankWorker& worker) {
  const auto captured = worker.prediction_target_state();
  if (!captured) return Error(ErrorCode::state, "no capture to publish");
  const auto dim = static_cast<std::int32_t>(captured->hidden.size());
  PredictionTargetHidden capture;
  capture.hidden = {{1, dim}, captured->hidden};
  capture.kept_rows = captured->kept_rows;
  capture.accepted = captured->accepted;
  capture.next_token = captured->next_token;
  return capture;
}

PredictionTargetState received_capture(const PredictionTargetHidden& capture) {
  return {capture.kept_rows, capture.accepted, capture.next_token, capture.hidden.data};
}

namespace {

bool is_phase(const std::optional<RunPhase>& marked, Epoch epoch, const PhaseId& phase) {
  return marked && marked->epoch == epoch && marked->phase == phase;
}

}  // namespace

void FaultMarks::mark(FaultKind kind, const RunPhase& run) {
  if (kind == FaultKind::drop) status_to_drop_ = run;
  if (kind == FaultKind::corrupt) shard_to_corrupt_ = run;
}

bool FaultMarks::lose(const RankMessage& message) {
  const auto* status = std::get_if<PhaseStatus>(&message);
  if (status == nullptr || !is_phase(status_to_drop_, status->epoch, status->phase)) return false;
  status_to_drop_.reset();
  return true;
}

bool FaultMarks::corrupt_after(const RunPhase& run) {
  if (!is_phase(shard_to_corrupt_, run.epoch, run.phase)) return false;
  shard_to_corrupt_.reset();
  return true;
}

std::string injected_fault_message(FaultKind kind, int rank, const PhaseId& phase) {
  return "injected fault: " + std::string(to_string(kind)) + " on rank " + std::to_string(rank) + " in " +
         to_string(phase);
}

}  // namespace accord
