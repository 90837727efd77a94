#include "runtime/model/cuda_transformer.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/ops.hpp"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/device_array.cuh"
#include "kernels/cuda/kernels.cuh"
#include "runtime/model/transformer.hpp"

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
      return Error(ErrorCode::architecture, std::string("the CUDA kernels take F32, F16 and Q8_0 weights, not ") +
                                                cpu::to_string(m->type));
    }
  }
  return {};
}

// The held units' keys and values on the device, (seq_len, kv_dim) per
// unit; rows cross to the host on the stage's stream.
class DeviceKv final : public KvStore {
 public:
  DeviceKv(const ModelConfig& config, int first_unit, int unit_count, const cudaStream_t& stream)
      : KvStore(config, first_unit, unit_count), stream_(stream), keys_(unit_count), values_(unit_count) {
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

  void view_rows(int unit, int first, int count, const RowsView& see) const override {
    const std::size_t floats = static_cast<std::size_t>(count) * kv_dim();
    staged_keys_.resize(floats);
    staged_values_.resize(floats);
    copy(staged_keys_.data(), row(keys(unit), first), floats, cudaMemcpyDeviceToHost);
    copy(staged_values_.data(), row(values(unit), first), floats, cudaMemcpyDeviceToHost);
    ACCORD_CUDA_CHECK(cudaStreamSynchronize(stream_));
    see(staged_keys_, staged_values_);
  }

  void write_rows(int unit, int first, int count, const float* keys_in, const float* values_in) override {
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
  std::vector<DeviceArray<float>> keys_, values_;
  mutable std::vector<float> staged_keys_, staged_values_;
};

}  // namespace

struct CudaTransformer::Impl {
  Impl(const Model& m, const WeightScope& s, int d) : model(m), scope(s), device(d) {}
  ~Impl() {
    cudaSetDevice(device);  // the arrays below free on it
    kv.reset();
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  void load();
  cuda::DeviceMatrix keep(const cpu::Matrix& matrix);
  const float* keep(const float* norm, std::size_t count);
  void on_device() const { ACCORD_CUDA_CHECK(cudaSetDevice(device)); }
  void start_batch(int rows);
  void run_unit(int unit, int pos);
  std::span<float> head(Transformer::Rows rows);
  std::span<float> copy_hidden();

  const Model& model;
  WeightScope scope;
  int device;
  cudaStream_t stream = nullptr;
  std::vector<DeviceArray<std::byte>> weights;  // every matrix and norm, owned
  std::size_t weight_bytes = 0;
  cuda::DeviceMatrix embedding, classifier;
  const float* rms_final = nullptr;
  std::vector<DeviceLayer> layers;  // the scope's units, from scope.first_unit
  DeviceArray<float> rope_cos, rope_sin;
  std::unique_ptr<DeviceKv> kv;
  DeviceArray<float> x, xb, xb2, q, k, v, hb, hb2, logits, scratch;
  DeviceArray<int> tokens;
  int batch = 0;
  std::vector<float> host_hidden, host_logits;
};

cuda::DeviceMatrix CudaTransformer::Impl::keep(const cpu::Matrix& matrix) {
  DeviceArray<std::byte> array = upload(matrix.data, matrix.bytes());
  const cuda::DeviceMatrix kept{matrix.type, array.get(), matrix.rows, matrix.cols};
  weight_bytes += matrix.bytes();
  weights.push_back(std::move(array));
  return kept;
}

const float* CudaTransformer::Impl::keep(const float* norm, std::size_t count) {
  DeviceArray<std::byte> array = upload(reinterpret_cast<const std::byte*>(norm), count * sizeof(float));
  const auto* kept = reinterpret_cast<const float*>(array.get());
  weight_bytes += count * sizeof(float);
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
  kv = std::make_unique<DeviceKv>(c, scope.first_unit, scope.units, stream);
}

void CudaTransformer::Impl::start_batch(int rows) {
  const ModelConfig& c = model.config();
  const auto b = static_cast<std::size_t>(rows);
  for (auto* buffer : {&x, &xb, &xb2, &q}) buffer->ensure(b * c.dim);
  for (auto* buffer : {&k, &v}) buffer->ensure(b * c.kv_dim());
  for (auto* buffer : {&hb, &hb2}) buffer->ensure(b * c.hidden_dim);
  scratch.ensure(cuda::attention_scratch_floats(rows, c.n_heads, c.head_size(), c.seq_len));
  tokens.ensure(b);
  batch = rows;
}

void CudaTransformer::Impl::run_unit(int unit, int pos) {
  const ModelConfig& c = model.config();
  const DeviceLayer& w = layers[static_cast<std::size_t>(unit - scope.first_unit)];
  const auto rows = static_cast<std::size_t>(batch);
  const std::size_t kv_bytes = rows * c.kv_dim() * sizeof(float);
  const std::size_t at = static_cast<std::size_t>(pos) * c.kv_dim();
  float* keys = kv->keys(unit);
  float* values = kv->values(unit);
  cuda::rmsnorm(stream, xb.get(), x.get(), w.rms_att, batch, c.dim, c.norm_eps);
  cuda::matmul(stream, q.get(), xb.get(), w.wq, batch);
  cuda::matmul(stream, k.get(), xb.get(), w.wk, batch);
  cuda::matmul(stream, v.get(), xb.get(), w.wv, batch);
  cuda::rope(stream, q.get(), batch, c.n_heads, c.head_size(), pos, rope_cos.get(), rope_sin.get());
  cuda::rope(stream, k.get(), batch, c.n_kv_heads, c.head_size(), pos, rope_cos.get(), rope_sin.get());
  ACCORD_CUDA_CHECK(cudaMemcpyAsync(keys + at, k.get(), kv_bytes, cudaMemcpyDeviceToDevice, stream));
  ACCORD_CUDA_CHECK(cudaMemcpyAsync(values + at, v.get(), kv_bytes, cudaMemcpyDeviceToDevice, stream));
  cuda::attention(stream, xb.get(), q.get(), keys, values, batch, pos, c.n_heads, c.n_kv_heads, c.head_size(),
                  scratch.get());
  cuda::matmul(stream, xb2.get(), xb.get(), w.wo, batch);
  // Feed-forward: w2(silu(w1 x) * w3 x).
  cuda::add_rmsnorm(stream, x.get(), xb2.get(), xb.get(), w.rms_ffn, batch, c.dim, c.norm_eps);
  cuda::matmul(stream, hb.get(), xb.get(), w.w1, batch);
  cuda::matmul(stream, hb2.get(), xb.get(), w.w3, batch);
  cuda::silu_mul(stream, hb.get(), hb2.get(), rows * c.hidden_dim);
  cuda::matmul(stream, xb.get(), hb.get(), w.w2, batch);
  cuda::add(stream, x.get(), xb.get(), rows * c.dim);
}

std::span<float> CudaTransformer::Impl::head(Transformer::Rows which) {
  const ModelConfig& c = model.config();
  const int rows = which == Transformer::Rows::all ? batch : 1;
  const float* first = x.get() + static_cast<std::size_t>(batch - rows) * c.dim;
  const std::size_t count = static_cast<std::size_t>(rows) * c.vocab_size;
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
  host_hidden.resize(static_cast<std::size_t>(batch) * model.config().dim);
  ACCORD_CUDA_CHECK(cudaMemcpyAsync(host_hidden.data(), x.get(), host_hidden.size() * sizeof(float),
                                    cudaMemcpyDeviceToHost, stream));
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
    return Error(ErrorCode::io, "cannot load the model onto CUDA device " + std::to_string(device) + ": " +
                                    failure.what());
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
  const std::vector<float>& rows = impl_->host_hidden;
  ACCORD_CUDA_CHECK(cudaMemcpyAsync(impl_->x.get(), rows.data(), rows.size() * sizeof(float),
                                    cudaMemcpyHostToDevice, impl_->stream));
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

std::size_t CudaTransformer::weight_bytes() const { return impl_->weight_bytes; }

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
