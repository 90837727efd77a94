#include "runtime/model/cuda_transformer.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/ops.hpp"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/device_array.cuh"
#include "kernels/cuda/kernels.cuh"
#include "runtime/model/transformer.hpp"
#include "runtime/model/weights.hpp"

namespace accord {

namespace {

using cuda::DeviceArray;

template <class T>
DeviceArray<T> upload(const T* host, std::size_t count) {
  DeviceArray<T> array;
  array.ensure(count);
  ACCORD_CUDA_CHECK(cudaMemcpy(array.get(), host, count * sizeof(T), cudaMemcpyHostToDevice));
  return array;
}

struct DeviceLayer {
  const float* rms_att = nullptr;
  cuda::DeviceMatrix wq, wk, wv, wo;
  const float* rms_ffn = nullptr;
  cuda::DeviceMatrix w1, w2, w3;
};

Status check_weight_types(const Model& model, const WeightScope& scope) {
  const ModelWeights& weights = model.weights();
  std::vector<const cpu::Matrix*> matrices;
  if (scope.embedding || scope.head) matrices.push_back(&weights.token_embedding);
  if (scope.head) matrices.push_back(&weights.classifier);
  for (int l = scope.first_unit; l < scope.first_unit + scope.units && l < model.config().n_layers; ++l) {
    const LayerWeights& layer = weights.layers[static_cast<std::size_t>(l)];
    for (const cpu::Matrix* m : {&layer.wq, &layer.wk, &layer.wv, &layer.wo, &layer.w1, &layer.w2, &layer.w3}) {
      matrices.push_back(m);
    }
  }
  for (const cpu::Matrix* m : matrices) {
    if (!cuda::supported(m->type)) {
      return Error(ErrorCode::architecture,
                   std::string("the CUDA kernels take F32, F16 and Q8_0 weights, not ") + cpu::to_string(m->type));
    }
  }
  return {};
}

// The held units' keys and values on the device, (seq_len, kv_dim) per
// unit; rows cross to the host on the stage's stream, after `settle` has
// launched whatever units the stage still holds back.
class DeviceKv final : public KvStore {
 public:
  DeviceKv(const ModelConfig& config, int first_unit, int unit_count, const cudaStream_t& stream,
           std::function<void()> settle)
      : KvStore(config, first_unit, unit_count),
        stream_(stream),
        settle_(std::move(settle)),
        keys_(unit_count),
        values_(unit_count) {
    const std::size_t floats = static_cast<std::size_t>(capacity()) * kv_dim();
    // Zeroed as the CPU's are: a checkpoint may copy rows never written.
    for (int i = 0; i < unit_count; ++i) {
      for (DeviceArray<float>* rows : {&keys_[i], &values_[i]}) {
        rows->ensure(floats);
        ACCORD_CUDA_CHECK(cudaMemset(rows->get(), 0, floats * sizeof(float)));
      }
    }
  }

  float* keys(int unit) const { return keys_[static_cast<std::size_t>(unit - first_unit())].get(); }
  float* values(int unit) const { return values_[static_cast<std::size_t>(unit - first_unit())].get(); }

  // The whole context is allocated at construction.
  Status reserve(int) override { return {}; }
  int reserved() const override { return capacity(); }
  void shrink_to(int) override {}
  std::uint64_t held_bytes() const override { return capacity_bytes(); }

  void view_rows(int unit, int first, int count, const RowsView& see) const override {
    settle_();
    const std::size_t floats = static_cast<std::size_t>(count) * kv_dim();
    staged_keys_.resize(floats);
    staged_values_.resize(floats);
    copy(staged_keys_.data(), row(keys(unit), first), floats, cudaMemcpyDeviceToHost);
    copy(staged_values_.data(), row(values(unit), first), floats, cudaMemcpyDeviceToHost);
    ACCORD_CUDA_CHECK(cudaStreamSynchronize(stream_));
    see(staged_keys_, staged_values_);
  }

  void write_rows(int unit, int first, int count, const float* keys_in, const float* values_in) override {
    settle_();
    const std::size_t floats = static_cast<std::size_t>(count) * kv_dim();
    copy(row(keys(unit), first), keys_in, floats, cudaMemcpyHostToDevice);
    copy(row(values(unit), first), values_in, floats, cudaMemcpyHostToDevice);
    ACCORD_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  float* row(float* base, int first) const { return base + static_cast<std::size_t>(first) * kv_dim(); }
  void copy(float* to, const float* from, std::size_t floats, cudaMemcpyKind kind) const {
    ACCORD_CUDA_CHECK(cudaMemcpyAsync(to, from, floats * sizeof(float), kind, stream_));
  }

  const cudaStream_t& stream_;  // the stage's, created before the store
  std::function<void()> settle_;
  std::vector<DeviceArray<float>> keys_, values_;
  mutable std::vector<float> staged_keys_, staged_values_;
};

}  // namespace

struct CudaTransformer::Impl {
  Impl(const Model& m, const WeightScope& s, int d) : model(m), scope(s), device(d) {}
  ~Impl() {
    cudaSetDevice(device);  // the arrays below free on it
    forget_graphs();
    kv.reset();
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  void load();
  cuda::DeviceMatrix keep(const cpu::Matrix& matrix);
  const float* keep(const float* norm, std::size_t count);
  void on_device() const { ACCORD_CUDA_CHECK(cudaSetDevice(device)); }
  void start_batch(int rows);
  void run_unit(int unit, int pos);
  void launch_unit(int unit);
  void settle();
  cudaGraphExec_t graph_for(int first_unit, int count);
  void forget_graphs();
  std::span<float> head(Transformer::Rows rows);
  std::span<float> copy_hidden();

  const Model& model;
  WeightScope scope;
  int device;
  cudaStream_t stream = nullptr;
  std::vector<DeviceArray<std::byte>> weights;  // every matrix and norm, owned
  cuda::DeviceMatrix embedding, classifier;
  const float* rms_final = nullptr;
  std::vector<DeviceLayer> layers;  // the scope's units, from scope.first_unit
  DeviceArray<float> rope_cos, rope_sin;
  std::unique_ptr<DeviceKv> kv;
  DeviceArray<float> x, xb, q, hb, logits, scratch;
  DeviceArray<int> tokens;
  DeviceArray<int> pos;  // the position of the batch's first row, for the kernels
  int batch = 0;
  // A decode step (one row) does not launch its units one by one: a small
  // model's kernels take less time than their launches. run_unit notes a
  // run of consecutive units, and settle() launches it as one CUDA graph,
  // captured the first time and replayed after, at the stage's last unit or
  // before anything reads or writes what the units change (activations,
  // keys and values), whichever comes first.
  struct HeldUnits {
    int first = 0, count = 0, pos = 0;
  } held;
  std::map<std::pair<int, int>, cudaGraphExec_t> graphs;  // by (first unit, count); on these buffers
  std::vector<float> host_hidden, host_logits;
};

cuda::DeviceMatrix CudaTransformer::Impl::keep(const cpu::Matrix& matrix) {
  DeviceArray<std::byte> array = upload(matrix.data, matrix.bytes());
  const cuda::DeviceMatrix kept{matrix.type, array.get(), matrix.rows, matrix.cols};
  weights.push_back(std::move(array));
  return kept;
}

const float* CudaTransformer::Impl::keep(const float* norm, std::size_t count) {
  DeviceArray<std::byte> array = upload(reinterpret_cast<const std::byte*>(norm), count * sizeof(float));
  const auto* kept = reinterpret_cast<const float*>(array.get());
  weights.push_back(std::move(array));
  return kept;
}

void CudaTransformer::Impl::load() {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  on_device();
  ACCORD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const auto dim = static_cast<std::size_t>(c.dim);
  // A shared classifier is the embedding: one copy serves both.
  const bool shared = w.classifier == w.token_embedding;
  if (scope.embedding || (scope.head && shared)) embedding = keep(w.token_embedding);
  if (scope.head) {
    classifier = shared ? embedding : keep(w.classifier);
    rms_final = keep(w.rms_final, dim);
  }
  scope.units = std::min(scope.units, c.n_layers - scope.first_unit);
  for (int l = scope.first_unit; l < scope.first_unit + scope.units; ++l) {
    const LayerWeights& layer = w.layers[static_cast<std::size_t>(l)];
    layers.push_back({keep(layer.rms_att, dim), keep(layer.wq), keep(layer.wk), keep(layer.wv), keep(layer.wo),
                      keep(layer.rms_ffn, dim), keep(layer.w1), keep(layer.w2), keep(layer.w3)});
  }
  const std::size_t table = static_cast<std::size_t>(c.seq_len) * (c.head_size() / 2);
  std::vector<float> cos(table), sin(table);
  cpu::rope_tables(cos.data(), sin.data(), c.seq_len, c.head_size(), c.rope_theta);
  rope_cos = upload(cos.data(), table);
  rope_sin = upload(sin.data(), table);
  kv = std::make_unique<DeviceKv>(c, scope.first_unit, scope.units, stream, [this] { settle(); });
  pos.ensure(1);
}

void CudaTransformer::Impl::start_batch(int rows) {
  const ModelConfig& c = model.config();
  const auto b = static_cast<std::size_t>(rows);
  settle();
  bool moved = hb.ensure(b * c.hidden_dim);
  for (auto* buffer : {&x, &xb, &q}) moved |= buffer->ensure(b * c.dim);
  const std::size_t scratch_floats = cuda::attention_scratch_floats(rows, c.n_heads, c.head_size(), c.seq_len);
  if (scratch.ensure(scratch_floats)) {
    ACCORD_CUDA_CHECK(cudaMemsetAsync(scratch.get(), 0, scratch_floats * sizeof(float), stream));
    moved = true;
  }
  if (moved) forget_graphs();
  tokens.ensure(b);
  batch = rows;
}

void CudaTransformer::Impl::run_unit(int unit, int at) {
  if (batch == 1) {
    if (held.count > 0 && (unit != held.first + held.count || at != held.pos)) settle();
    if (held.count == 0) held = {unit, 0, at};
    ++held.count;
    // The stage's last unit launches the run at once, so that a step's
    // units are launched within its execution, not left to a later step.
    if (unit == scope.first_unit + scope.units - 1) settle();
    return;
  }
  settle();
  cuda::set(stream, pos.get(), at);
  launch_unit(unit);
}

void CudaTransformer::Impl::settle() {
  if (held.count == 0) return;
  const HeldUnits run = std::exchange(held, {});
  cuda::set(stream, pos.get(), run.pos);
  ACCORD_CUDA_CHECK(cudaGraphLaunch(graph_for(run.first, run.count), stream));
}

cudaGraphExec_t CudaTransformer::Impl::graph_for(int first_unit, int count) {
  cudaGraphExec_t& exec = graphs[{first_unit, count}];
  if (exec != nullptr) return exec;
  // Thread-local capture: ranks on other threads may share the device.
  ACCORD_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    for (int unit = first_unit; unit < first_unit + count; ++unit) launch_unit(unit);
  } catch (const cuda::CudaFailure&) {
    cudaStreamEndCapture(stream, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    throw;
  }
  ACCORD_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  ACCORD_CUDA_CHECK(made);
  return exec;
}

void CudaTransformer::Impl::forget_graphs() {
  for (const auto& [units, exec] : graphs) {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
  }
  graphs.clear();
}

// The unit's kernels for the batch at the position in `pos`.
void CudaTransformer::Impl::launch_unit(int unit) {
  const ModelConfig& c = model.config();
  const DeviceLayer& w = layers[static_cast<std::size_t>(unit - scope.first_unit)];
  const cuda::QkvOutputs qkv{q.get(),       kv->keys(unit), kv->values(unit), pos.get(),
                             c.head_size(), rope_cos.get(), rope_sin.get()};
  cuda::qkv(stream, qkv, x.get(), {w.rms_att, c.norm_eps, xb.get()}, w.wq, w.wk, w.wv, batch);
  cuda::attention(stream, xb.get(), q.get(), qkv.keys, qkv.values, batch, pos.get(), c.seq_len, c.n_heads, c.n_kv_heads,
                  c.head_size(), scratch.get());
  cuda::matmul_add(stream, x.get(), xb.get(), w.wo, batch);
  // Feed-forward: x += w2(silu(w1 x) * w3 x).
  cuda::gate_up(stream, hb.get(), x.get(), {w.rms_ffn, c.norm_eps, xb.get()}, w.w1, w.w3, batch);
  cuda::matmul_add(stream, x.get(), hb.get(), w.w2, batch);
}

std::span<float> CudaTransformer::Impl::head(Transformer::Rows which) {
  const ModelConfig& c = model.config();
  const int rows = which == Transformer::Rows::all ? batch : 1;
  const float* first = x.get() + static_cast<std::size_t>(batch - rows) * c.dim;
  const std::size_t count = static_cast<std::size_t>(rows) * c.vocab_size;
  settle();
  logits.ensure(count);
  cuda::rmsnorm(stream, xb.get(), first, rms_final, rows, c.dim, c.norm_eps);
  cuda::matmul(stream, logits.get(), xb.get(), classifier, rows);
  host_logits.resize(count);
  ACCORD_CUDA_CHECK(
      cudaMemcpyAsync(host_logits.data(), logits.get(), count * sizeof(float), cudaMemcpyDeviceToHost, stream));
  ACCORD_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host_logits;
}

std::span<float> CudaTransformer::Impl::copy_hidden() {
  settle();
  host_hidden.resize(static_cast<std::size_t>(batch) * model.config().dim);
  ACCORD_CUDA_CHECK(
      cudaMemcpyAsync(host_hidden.data(), x.get(), host_hidden.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
  ACCORD_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host_hidden;
}

CudaTransformer::CudaTransformer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaTransformer::~CudaTransformer() = default;

Result<std::unique_ptr<CudaTransformer>> CudaTransformer::create(const Model& model, const WeightScope& scope,
                                                                 int device) {
  if (Status ok = check_weight_types(model, scope); !ok) return ok.error();
  auto impl = std::make_unique<Impl>(model, scope, device);
  try {
    impl->load();
  } catch (const cuda::CudaFailure& failure) {
    return Error(ErrorCode::io,
                 "cannot load the model onto CUDA device " + std::to_string(device) + ": " + failure.what());
  }
  return std::unique_ptr<CudaTransformer>(new CudaTransformer(std::move(impl)));
}

KvStore& CudaTransformer::kv() { return *impl_->kv; }

void CudaTransformer::embed(std::span<const int> step_tokens) {
  impl_->on_device();
  impl_->start_batch(static_cast<int>(step_tokens.size()));
  ACCORD_CUDA_CHECK(cudaMemcpyAsync(impl_->tokens.get(), step_tokens.data(), step_tokens.size_bytes(),
                                    cudaMemcpyHostToDevice, impl_->stream));
  cuda::embed(impl_->stream, impl_->x.get(), impl_->embedding, impl_->tokens.get(), impl_->batch);
}

void CudaTransformer::load_hidden(std::span<const float> rows) {
  impl_->on_device();
  impl_->start_batch(static_cast<int>(rows.size() / static_cast<std::size_t>(impl_->model.config().dim)));
  ACCORD_CUDA_CHECK(
      cudaMemcpyAsync(impl_->x.get(), rows.data(), rows.size_bytes(), cudaMemcpyHostToDevice, impl_->stream));
}

void CudaTransformer::run_unit(int unit, int pos) {
  impl_->on_device();
  impl_->run_unit(unit, pos);
}

int CudaTransformer::batch() const { return impl_->batch; }

std::span<float> CudaTransformer::hidden() {
  impl_->on_device();
  return impl_->copy_hidden();
}

void CudaTransformer::hidden_changed() {
  impl_->on_device();
  impl_->settle();
  const std::vector<float>& rows = impl_->host_hidden;
  ACCORD_CUDA_CHECK(
      cudaMemcpyAsync(impl_->x.get(), rows.data(), rows.size() * sizeof(float), cudaMemcpyHostToDevice, impl_->stream));
  ACCORD_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));  // the host rows may change again
}

std::span<float> CudaTransformer::head(Transformer::Rows rows) {
  impl_->on_device();
  return impl_->head(rows);
}

Result<std::span<const float>> CudaTransformer::forward(std::span<const int> tokens, int pos) {
  if (Status ok = check_tokens(impl_->model.config(), tokens, pos); !ok) return ok.error();
  try {
    embed(tokens);
    for (int unit = 0; unit < impl_->model.config().n_layers; ++unit) run_unit(unit, pos);
    return std::span<const float>(head(Transformer::Rows::last));
  } catch (const cuda::CudaFailure& failure) {
    return Error(ErrorCode::mechanism, std::string("CUDA forward pass failed: ") + failure.what());
  }
}

bool built_with_cuda() { return true; }

Status check_cuda_devices(std::span<const int> devices) {
  const cuda::DeviceQuery query = cuda::query_devices();
  if (!query.error.empty()) return Error(ErrorCode::mechanism, query.error);
  for (int device : devices) {
    if (device < 0 || device >= static_cast<int>(query.devices.size())) {
      return Error(ErrorCode::contract, "CUDA device " + std::to_string(device) + " does not exist: this machine has " +
                                            std::to_string(query.devices.size()));
    }
  }
  return {};
}

Result<std::unique_ptr<StageBackend>> make_cuda_stage(const Model& model, const WeightScope& scope, int device) {
  const int devices[] = {device};
  if (Status ok = check_cuda_devices(devices); !ok) return ok.error();
  auto stage = CudaTransformer::create(model, scope, device);
  if (!stage) return stage.error();
  return std::unique_ptr<StageBackend>(std::move(*stage));
}

}  // namespace accord
