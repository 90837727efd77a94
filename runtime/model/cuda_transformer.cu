#include "runtime/model/cuda_transformer.hpp"

#include <cuda_runtime.h>

#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/ops.hpp"
#include "kernels/cuda/check.cuh"
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

Status check_weight_types(const ModelWeights& weights) {
  std::vector<const cpu::Matrix*> matrices{&weights.token_embedding, &weights.classifier};
  for (const LayerWeights& layer : weights.layers) {
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

}  // namespace

struct CudaTransformer::Impl {
  Impl(const Model& m, int d) : model(m), device(d) {}
  ~Impl() {
    cudaSetDevice(device);  // the arrays below free on it
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  void load();
  cuda::DeviceMatrix keep(const cpu::Matrix& matrix);
  const float* keep(const float* norm, std::size_t count);
  void ensure_batch(int batch);
  void run(std::span<const int> tokens, int pos);
  void run_layer(std::size_t layer, int batch, int pos);

  const Model& model;
  int device;
  cudaStream_t stream = nullptr;
  std::vector<DeviceArray<std::byte>> weights;  // every matrix and norm, owned
  std::size_t weight_bytes = 0;
  cuda::DeviceMatrix embedding, classifier;
  const float* rms_final = nullptr;
  std::vector<DeviceLayer> layers;
  DeviceArray<float> rope_cos, rope_sin;
  std::vector<DeviceArray<float>> keys, values;  // per layer: (seq_len, kv_dim)
  DeviceArray<float> x, xb, xb2, q, k, v, hb, hb2, logits, scratch;
  DeviceArray<int> tokens;
  std::vector<float> host_logits;
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
  ACCORD_CUDA_CHECK(cudaSetDevice(device));
  ACCORD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const auto dim = static_cast<std::size_t>(c.dim);
  embedding = keep(w.token_embedding);
  // A shared classifier is the embedding: one copy serves both.
  classifier = w.classifier == w.token_embedding ? embedding : keep(w.classifier);
  rms_final = keep(w.rms_final, dim);
  for (const LayerWeights& layer : w.layers) {
    layers.push_back({keep(layer.rms_att, dim), keep(layer.wq), keep(layer.wk), keep(layer.wv), keep(layer.wo),
                      keep(layer.rms_ffn, dim), keep(layer.w1), keep(layer.w2), keep(layer.w3)});
  }
  const std::size_t table = static_cast<std::size_t>(c.seq_len) * (c.head_size() / 2);
  std::vector<float> cos(table), sin(table);
  cpu::rope_tables(cos.data(), sin.data(), c.seq_len, c.head_size(), c.rope_theta);
  rope_cos = upload(cos.data(), table);
  rope_sin = upload(sin.data(), table);
  const std::size_t cache = static_cast<std::size_t>(c.seq_len) * c.kv_dim();
  keys.resize(layers.size());
  values.resize(layers.size());
  for (std::size_t l = 0; l < layers.size(); ++l) {
    keys[l].ensure(cache);
    values[l].ensure(cache);
  }
  logits.ensure(static_cast<std::size_t>(c.vocab_size));
  host_logits.resize(static_cast<std::size_t>(c.vocab_size));
}

void CudaTransformer::Impl::ensure_batch(int batch) {
  const ModelConfig& c = model.config();
  const auto b = static_cast<std::size_t>(batch);
  for (auto* buffer : {&x, &xb, &xb2, &q}) buffer->ensure(b * c.dim);
  for (auto* buffer : {&k, &v}) buffer->ensure(b * c.kv_dim());
  for (auto* buffer : {&hb, &hb2}) buffer->ensure(b * c.hidden_dim);
  scratch.ensure(cuda::attention_scratch_floats(batch, c.n_heads, c.head_size(), c.seq_len));
  tokens.ensure(b);
}

void CudaTransformer::Impl::run_layer(std::size_t l, int batch, int pos) {
  const ModelConfig& c = model.config();
  const DeviceLayer& w = layers[l];
  const auto rows = static_cast<std::size_t>(batch);
  const std::size_t kv_bytes = rows * c.kv_dim() * sizeof(float);
  const std::size_t at = static_cast<std::size_t>(pos) * c.kv_dim();
  cuda::rmsnorm(stream, xb.get(), x.get(), w.rms_att, batch, c.dim, c.norm_eps);
  cuda::matmul(stream, q.get(), xb.get(), w.wq, batch);
  cuda::matmul(stream, k.get(), xb.get(), w.wk, batch);
  cuda::matmul(stream, v.get(), xb.get(), w.wv, batch);
  cuda::rope(stream, q.get(), batch, c.n_heads, c.head_size(), pos, rope_cos.get(), rope_sin.get());
  cuda::rope(stream, k.get(), batch, c.n_kv_heads, c.head_size(), pos, rope_cos.get(), rope_sin.get());
  ACCORD_CUDA_CHECK(cudaMemcpyAsync(keys[l].get() + at, k.get(), kv_bytes, cudaMemcpyDeviceToDevice, stream));
  ACCORD_CUDA_CHECK(cudaMemcpyAsync(values[l].get() + at, v.get(), kv_bytes, cudaMemcpyDeviceToDevice, stream));
  cuda::attention(stream, xb.get(), q.get(), keys[l].get(), values[l].get(), batch, pos, c.n_heads, c.n_kv_heads,
                  c.head_size(), scratch.get());
  cuda::matmul(stream, xb2.get(), xb.get(), w.wo, batch);
  // Feed-forward: w2(silu(w1 x) * w3 x).
  cuda::add_rmsnorm(stream, x.get(), xb2.get(), xb.get(), w.rms_ffn, batch, c.dim, c.norm_eps);
  cuda::matmul(stream, hb.get(), xb.get(), w.w1, batch);
  cuda::matmul(stream, hb2.get(), xb.get(), w.w3, batch);
  cuda::silu_mul(stream, hb.get(), hb2.get(), rows * c.hidden_dim);
  cuda::matmul(stream, xb.get(), hb.get(), w.w2, batch);
  cuda::add(stream, x.get(), xb.get(), rows * c.dim);
}

void CudaTransformer::Impl::run(std::span<const int> step_tokens, int pos) {
  const ModelConfig& c = model.config();
  const int batch = static_cast<int>(step_tokens.size());
  ACCORD_CUDA_CHECK(cudaSetDevice(device));
  ensure_batch(batch);
  ACCORD_CUDA_CHECK(cudaMemcpyAsync(tokens.get(), step_tokens.data(), step_tokens.size_bytes(),
                                    cudaMemcpyHostToDevice, stream));
  cuda::embed(stream, x.get(), embedding, tokens.get(), batch);
  for (std::size_t l = 0; l < layers.size(); ++l) run_layer(l, batch, pos);
  const float* last = x.get() + static_cast<std::size_t>(batch - 1) * c.dim;
  cuda::rmsnorm(stream, xb.get(), last, rms_final, 1, c.dim, c.norm_eps);
  cuda::matmul(stream, logits.get(), xb.get(), classifier, 1);
  ACCORD_CUDA_CHECK(cudaMemcpyAsync(host_logits.data(), logits.get(), host_logits.size() * sizeof(float),
                                    cudaMemcpyDeviceToHost, stream));
  ACCORD_CUDA_CHECK(cudaStreamSynchronize(stream));
}

CudaTransformer::CudaTransformer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaTransformer::~CudaTransformer() = default;

Result<std::unique_ptr<CudaTransformer>> CudaTransformer::create(const Model& model, int device) {
  if (Status ok = check_weight_types(model.weights()); !ok) return ok.error();
  auto impl = std::make_unique<Impl>(model, device);
  try {
    impl->load();
  } catch (const cuda::CudaFailure& failure) {
    return Error(ErrorCode::io, "cannot load the model onto CUDA device " + std::to_string(device) + ": " +
                                    failure.what());
  }
  return std::unique_ptr<CudaTransformer>(new CudaTransformer(std::move(impl)));
}

Result<std::span<const float>> CudaTransformer::forward(std::span<const int> tokens, int pos) {
  if (Status ok = check_tokens(impl_->model.config(), tokens, pos); !ok) return ok.error();
  try {
    impl_->run(tokens, pos);
  } catch (const cuda::CudaFailure& failure) {
    return Error(ErrorCode::mechanism, std::string("CUDA forward pass failed: ") + failure.what());
  }
  return std::span<const float>(impl_->host_logits);
}

std::size_t CudaTransformer::weight_bytes() const { return impl_->weight_bytes; }

}  // namespace accord
