#include "apps/accord-cuda-check/kernel_checks.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/ops.hpp"
#include "kernels/cpu/quant.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/device_array.cuh"
#include "kernels/cuda/kernels.cuh"

namespace accord::cuda {

namespace {

// Device copies of host vectors, freed together.
class Uploads {
 public:
  template <class T>
  T* copy(const std::vector<T>& host) {
    T* device = zeros<T>(host.size());
    ACCORD_CUDA_CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return device;
  }
  template <class T>
  T* zeros(std::size_t count) {
    const std::size_t bytes = std::max<std::size_t>(1, count) * sizeof(T);
    DeviceArray<std::byte> array;
    array.ensure(bytes);
    ACCORD_CUDA_CHECK(cudaMemset(array.get(), 0, bytes));
    owned_.push_back(std::move(array));
    return reinterpret_cast<T*>(owned_.back().get());
  }

 private:
  std::vector<DeviceArray<std::byte>> owned_;
};

template <class T>
std::vector<T> download(const T* device, std::size_t count) {
  ACCORD_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> host(count);
  ACCORD_CUDA_CHECK(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

std::vector<float> random_floats(std::mt19937& random, std::size_t count, float scale = 1.0f) {
  std::uniform_real_distribution<float> uniform(-scale, scale);
  std::vector<float> values(count);
  for (float& value : values) value = uniform(random);
  return values;
}

int report(const std::string& name, const std::vector<float>& got, const std::vector<float>& want, double tolerance) {
  const double error = got.size() == want.size() ? relative_error(got, want) : INFINITY;
  const bool ok = error <= tolerance;
  std::printf("%-34s relative error %.3g (tolerance %.1g)  %s\n", name.c_str(), error, tolerance, ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

// A weight matrix of `type` as the file stores it, from random floats.
std::vector<std::byte> stored(cpu::WeightType type, const std::vector<float>& values) {
  std::vector<std::byte> bytes(cpu::row_bytes(type, values.size()));
  if (type == cpu::WeightType::f32) {
    std::copy_n(reinterpret_cast<const std::byte*>(values.data()), bytes.size(), bytes.data());
  }
  if (type == cpu::WeightType::f16) cpu::quantize_f16(bytes.data(), values.data(), values.size());
  if (type == cpu::WeightType::q8_0) cpu::quantize_q8_0(bytes.data(), values.data(), values.size());
  return bytes;
}

// A random weight matrix of `type`, as the file stores it and dequantized.
struct RandomWeights {
  RandomWeights(std::mt19937& random, cpu::WeightType type, int rows, int cols)
      : bytes(stored(type, random_floats(random, static_cast<std::size_t>(rows) * cols))),
        matrix{type, bytes.data(), rows, cols},
        values(static_cast<std::size_t>(rows) * cols) {
    cpu::dequantize(matrix, values.data());
  }
  // x (batch, cols) times the dequantized weights, in double precision: the
  // CPU's Q8_0 product quantizes its input too, so it is not the reference.
  std::vector<float> times(const std::vector<float>& x, int batch) const {
    std::vector<float> out(static_cast<std::size_t>(batch) * matrix.rows);
    for (int t = 0; t < batch; ++t) {
      for (int r = 0; r < matrix.rows; ++r) {
        double sum = 0.0;
        for (int c = 0; c < matrix.cols; ++c) {
          sum += static_cast<double>(values[static_cast<std::size_t>(r) * matrix.cols + c]) *
                 x[static_cast<std::size_t>(t) * matrix.cols + c];
        }
        out[static_cast<std::size_t>(t) * matrix.rows + r] = static_cast<float>(sum);
      }
    }
    return out;
  }
  DeviceMatrix on(Uploads& device) const { return {matrix.type, device.copy(bytes), matrix.rows, matrix.cols}; }

  std::vector<std::byte> bytes;
  cpu::Matrix matrix;
  std::vector<float> values;
};

std::string shape_name(const std::string& kernel, cpu::WeightType type, int rows, int cols, int batch) {
  return kernel + " " + cpu::to_string(type) + " " + std::to_string(rows) + "x" + std::to_string(cols) + " batch " +
         std::to_string(batch);
}

// matmul, and matmul_add onto a random residual.
int check_matmul(std::mt19937& random, cpu::WeightType type, int rows, int cols, int batch) {
  const RandomWeights w(random, type, rows, cols);
  const std::vector<float> x = random_floats(random, static_cast<std::size_t>(batch) * cols);
  const std::vector<float> want = w.times(x, batch);
  Uploads device;
  const DeviceMatrix dw = w.on(device);
  float* dx = device.copy(x);
  float* out = device.zeros<float>(want.size());
  matmul(nullptr, out, dx, dw, batch);
  int failed = report(shape_name("matmul", type, rows, cols, batch), download(out, want.size()), want, 1e-5);
  std::vector<float> residual = random_floats(random, want.size());
  float* summed = device.copy(residual);
  matmul_add(nullptr, summed, dx, dw, batch);
  for (std::size_t i = 0; i < want.size(); ++i) residual[i] += want[i];
  failed += report(shape_name("matmul_add", type, rows, cols, batch), download(summed, want.size()), residual, 1e-5);
  return failed;
}

// The input RMSNorm of qkv and gate_up: its weights, and x normalized by them.
struct RandomNorm {
  RandomNorm(std::mt19937& random, const std::vector<float>& x, int rows, int cols)
      : weight(random_floats(random, static_cast<std::size_t>(cols))), normalized(x.size()) {
    cpu::ThreadPool pool(1);
    cpu::rmsnorm_rows(pool, normalized.data(), x.data(), weight.data(), rows, cols, kEps);
  }
  // On the device, with scratch for the input's rows.
  InputNorm on(Uploads& device) const { return {device.copy(weight), kEps, device.zeros<float>(normalized.size())}; }

  static constexpr float kEps = 1e-5f;
  std::vector<float> weight, normalized;
};

// Queries, keys and values of a batch at positions 5..: each the product of
// the normalized input, queries and keys rotated, keys and values at their
// rows of the cache and nothing else of it changed.
int check_qkv(std::mt19937& random, cpu::WeightType type, int batch, int heads, int kv_heads, int head_size) {
  const int seq_len = 16, pos = 5, half = head_size / 2;
  const int dim = heads * head_size, kv_dim = kv_heads * head_size;
  const RandomWeights wq(random, type, dim, dim), wk(random, type, kv_dim, dim), wv(random, type, kv_dim, dim);
  std::vector<float> cos(static_cast<std::size_t>(seq_len) * half), sin(cos.size());
  cpu::rope_tables(cos.data(), sin.data(), seq_len, head_size, 10000.0f);
  const std::vector<float> x = random_floats(random, static_cast<std::size_t>(batch) * dim);
  const RandomNorm norm(random, x, batch, dim);
  const std::vector<float>& normalized = norm.normalized;
  std::vector<float> q = wq.times(normalized, batch), k = wk.times(normalized, batch), v = wv.times(normalized, batch);
  std::vector<float> keys(static_cast<std::size_t>(seq_len) * kv_dim), values(keys.size());
  for (int t = 0; t < batch; ++t) {
    const std::size_t angle = static_cast<std::size_t>(pos + t) * half;
    cpu::rope(&q[static_cast<std::size_t>(t) * dim], heads, head_size, &cos[angle], &sin[angle]);
    cpu::rope(&k[static_cast<std::size_t>(t) * kv_dim], kv_heads, head_size, &cos[angle], &sin[angle]);
  }
  std::copy(k.begin(), k.end(), keys.begin() + static_cast<std::ptrdiff_t>(pos) * kv_dim);
  std::copy(v.begin(), v.end(), values.begin() + static_cast<std::ptrdiff_t>(pos) * kv_dim);
  Uploads device;
  const QkvOutputs out{device.zeros<float>(q.size()),
                       device.zeros<float>(keys.size()),
                       device.zeros<float>(values.size()),
                       device.copy(std::vector<int>{pos}),
                       head_size,
                       device.copy(cos),
                       device.copy(sin)};
  qkv(nullptr, out, device.copy(x), norm.on(device), wq.on(device), wk.on(device), wv.on(device), batch);
  const std::string name = shape_name("qkv", type, dim + 2 * kv_dim, dim, batch);
  return report(name + ": queries", download(out.q, q.size()), q, 1e-5) +
         report(name + ": keys", download(out.keys, keys.size()), keys, 1e-5) +
         report(name + ": values", download(out.values, values.size()), values, 1e-5);
}

int check_gate_up(std::mt19937& random, cpu::WeightType type, int rows, int cols, int batch) {
  const RandomWeights w1(random, type, rows, cols), w3(random, type, rows, cols);
  const std::vector<float> x = random_floats(random, static_cast<std::size_t>(batch) * cols, 3.0f);
  const RandomNorm norm(random, x, batch, cols);
  std::vector<float> want = w1.times(norm.normalized, batch);
  cpu::silu_mul(want.data(), w3.times(norm.normalized, batch).data(), static_cast<int>(want.size()));
  Uploads device;
  float* out = device.zeros<float>(want.size());
  gate_up(nullptr, out, device.copy(x), norm.on(device), w1.on(device), w3.on(device), batch);
  return report(shape_name("gate_up", type, rows, cols, batch), download(out, want.size()), want, 1e-5);
}

int check_embed(std::mt19937& random, cpu::WeightType type) {
  const int rows = 50, cols = 96;
  const std::vector<std::byte> bytes = stored(type, random_floats(random, static_cast<std::size_t>(rows) * cols));
  const std::vector<int> tokens{3, 49, 0, 3};
  std::vector<float> want(tokens.size() * cols);
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    cpu::dequantize_row({type, bytes.data(), rows, cols}, tokens[t], want.data() + t * cols);
  }
  Uploads device;
  float* out = device.zeros<float>(want.size());
  embed(nullptr, out, {type, device.copy(bytes), rows, cols}, device.copy(tokens), static_cast<int>(tokens.size()));
  return report(std::string("embed ") + cpu::to_string(type), download(out, want.size()), want, 0.0);
}

int check_rmsnorm(std::mt19937& random, cpu::ThreadPool& pool) {
  const int rows = 3, n = 300;
  const std::vector<float> x = random_floats(random, rows * n), weight = random_floats(random, n);
  std::vector<float> want(x.size());
  cpu::rmsnorm_rows(pool, want.data(), x.data(), weight.data(), rows, n, 1e-5f);
  Uploads device;
  float* out = device.zeros<float>(x.size());
  rmsnorm(nullptr, out, device.copy(x), device.copy(weight), rows, n, 1e-5f);
  return report("rmsnorm", download(out, x.size()), want, 1e-5);
}

// Batches of rows, each from its first position on, against a cache of 1024
// positions, one after another on the same scratch (sized for the largest)
// as a stage runs them: a prefill batch, then decode steps, then another.
struct AttentionBatch {
  int rows, first_pos;
};

int check_attention(std::mt19937& random, cpu::ThreadPool& pool, const std::vector<AttentionBatch>& batches,
                    int head_size) {
  constexpr int kCacheShift = 10;
  const int n_heads = 8, n_kv_heads = 2, seq_len = 1 << kCacheShift;
  const int kv_dim = n_kv_heads * head_size, q_dim = n_heads * head_size;
  const std::vector<float> keys = random_floats(random, static_cast<std::size_t>(seq_len) * kv_dim);
  const std::vector<float> values = random_floats(random, keys.size());
  int largest = 0;
  for (const AttentionBatch& batch : batches) largest = std::max(largest, batch.rows);
  Uploads device;
  const float *device_keys = device.copy(keys), *device_values = device.copy(values);
  float* scratch = device.zeros<float>(attention_scratch_floats(largest, n_heads, head_size, seq_len));
  // The CPU's reference reads a paged cache: here one block of every
  // position, its keys then its values.
  std::vector<float> host_cache = keys;
  host_cache.insert(host_cache.end(), values.begin(), values.end());
  const std::byte* block = reinterpret_cast<const std::byte*>(host_cache.data());
  const cpu::KvView host_kv{&block, 0, keys.size() * sizeof(float), kCacheShift, kv_dim, cpu::KvElement::f32};
  int failed = 0;
  for (const AttentionBatch& batch : batches) {
    const std::vector<float> q = random_floats(random, static_cast<std::size_t>(batch.rows) * q_dim, 2.0f);
    std::vector<float> want(q.size());
    cpu::attention(pool, want.data(), q.data(), host_kv, batch.rows, batch.first_pos, n_heads, n_kv_heads, head_size);
    float* out = device.zeros<float>(q.size());
    attention(nullptr, out, device.copy(q), device_keys, device_values, batch.rows,
              device.copy(std::vector<int>{batch.first_pos}), seq_len, n_heads, n_kv_heads, head_size, scratch);
    failed += report("attention rows " + std::to_string(batch.rows) + " from " + std::to_string(batch.first_pos) +
                         " head " + std::to_string(head_size),
                     download(out, q.size()), want, 1e-5);
  }
  return failed;
}

// Microseconds `launch` takes on the device's clock: the median of 21
// runs after two to warm up.
double median_us(const std::function<void()>& launch) {
  cudaEvent_t start, stop;
  ACCORD_CUDA_CHECK(cudaEventCreate(&start));
  ACCORD_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int i = 0; i < 23; ++i) {
    ACCORD_CUDA_CHECK(cudaEventRecord(start));
    launch();
    ACCORD_CUDA_CHECK(cudaEventRecord(stop));
    ACCORD_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    ACCORD_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (i >= 2) times.push_back(ms * 1000.0f);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// A weight matrix of the shape whose bytes are any that are no NaN: the
// values do not change the time.
DeviceMatrix filler(Uploads& device, cpu::WeightType type, int rows, int cols) {
  const std::size_t bytes = cpu::Matrix{type, nullptr, rows, cols}.bytes();
  auto* data = device.zeros<std::byte>(bytes);
  ACCORD_CUDA_CHECK(cudaMemset(data, 0x11, bytes));
  return {type, data, rows, cols};
}

}  // namespace

void time_decode_kernels(const DecodeShape& m) {
  ACCORD_CUDA_CHECK(cudaSetDevice(0));
  Uploads device;
  const int head_size = m.dim / m.n_heads, kv_dim = m.n_kv_heads * head_size;
  const DeviceMatrix wq = filler(device, m.type, m.dim, m.dim), wk = filler(device, m.type, kv_dim, m.dim),
                     wv = filler(device, m.type, kv_dim, m.dim), wo = filler(device, m.type, m.dim, m.dim),
                     w1 = filler(device, m.type, m.hidden, m.dim), w3 = filler(device, m.type, m.hidden, m.dim),
                     w2 = filler(device, m.type, m.dim, m.hidden), head = filler(device, m.type, m.vocab, m.dim);
  float* x = device.zeros<float>(static_cast<std::size_t>(std::max(m.hidden, m.vocab)));
  float* out = device.zeros<float>(static_cast<std::size_t>(std::max(m.hidden, m.vocab)));
  const InputNorm norm{device.zeros<float>(static_cast<std::size_t>(m.dim)), 1e-5f,
                       device.zeros<float>(static_cast<std::size_t>(m.dim))};
  const std::size_t table = static_cast<std::size_t>(m.seq_len) * head_size / 2;
  float* keys = device.zeros<float>(static_cast<std::size_t>(m.seq_len) * kv_dim);
  float* values = device.zeros<float>(static_cast<std::size_t>(m.seq_len) * kv_dim);
  float* scratch = device.zeros<float>(attention_scratch_floats(1, m.n_heads, head_size, m.seq_len));
  const int middle = m.seq_len / 2;
  const int* pos = device.copy(std::vector<int>{middle});
  const QkvOutputs qkv_out{out, keys, values, pos, head_size, device.zeros<float>(table), device.zeros<float>(table)};
  const auto bytes = [](const DeviceMatrix& w) { return static_cast<double>(w.bytes()); };
  struct Timed {
    std::string name;
    double bytes;
    std::function<void()> launch;
  };
  const std::vector<Timed> kernels = {
      {"qkv", bytes(wq) + bytes(wk) + bytes(wv), [&] { qkv(nullptr, qkv_out, x, norm, wq, wk, wv, 1); }},
      {"attention at position " + std::to_string(middle), 0,
       [&] {
         attention(nullptr, out, x, keys, values, 1, pos, m.seq_len, m.n_heads, m.n_kv_heads, head_size, scratch);
       }},
      {"matmul_add wo", bytes(wo), [&] { matmul_add(nullptr, out, x, wo, 1); }},
      {"gate_up", bytes(w1) + bytes(w3), [&] { gate_up(nullptr, out, x, norm, w1, w3, 1); }},
      {"matmul_add w2", bytes(w2), [&] { matmul_add(nullptr, out, x, w2, 1); }},
  };
  double layer_us = 0, layer_bytes = 0;
  for (const Timed& kernel : kernels) {
    const double us = median_us(kernel.launch);
    layer_us += us;
    layer_bytes += kernel.bytes;
    std::printf("  %-28s %7.1f us", kernel.name.c_str(), us);
    if (kernel.bytes > 0) std::printf(", %.0f GB/s", kernel.bytes / us / 1e3);
    std::printf("\n");
  }
  const double head_us = median_us([&] { matmul(nullptr, out, x, head, 1); });
  std::printf("  %-28s %7.1f us, %.0f GB/s\n", "classifier", head_us, bytes(head) / head_us / 1e3);
  const double step_us = layer_us * m.layers + head_us;
  std::printf("kernels one at a time: a layer %.1f us (%.0f GB/s), a step of %d layers and the head %.0f us\n",
              layer_us, layer_bytes / layer_us / 1e3, m.layers, step_us);
}

int run_kernel_checks() {
  ACCORD_CUDA_CHECK(cudaSetDevice(0));
  std::mt19937 random(18);
  cpu::ThreadPool pool(2);
  int failed = 0;
  for (cpu::WeightType type : {cpu::WeightType::f32, cpu::WeightType::f16, cpu::WeightType::q8_0}) {
    // Widths of several rounds of loads, and batches past one pass; a decode
    // step's row at the widest input the decode kernels hold (F16).
    failed += check_matmul(random, type, 67, 96, 1);
    failed += check_matmul(random, type, 67, 2080, 6);
    failed += check_matmul(random, type, 67, 2048, 1);
    // Rows in two and four parts, the last block not full.
    failed += check_matmul(random, type, 37, 4096, 1);
    failed += check_matmul(random, type, 19, 8192, 5);
    failed += check_qkv(random, type, 1, 4, 2, 16);
    failed += check_qkv(random, type, 6, 4, 2, 16);
    failed += check_qkv(random, type, 1, 16, 1, 2);  // 36 rows: the last block not full
    failed += check_gate_up(random, type, 81, 96, 5);
    failed += check_gate_up(random, type, 81, 96, 1);
    failed += check_gate_up(random, type, 40, 2048, 1);
    failed += check_embed(random, type);
  }
  // Widths the vector loads do not divide take the scalar loop.
  failed += check_matmul(random, cpu::WeightType::f32, 33, 102, 3);
  failed += check_matmul(random, cpu::WeightType::f16, 33, 102, 3);
  // A decode step's row that leaves lanes of the warp without values.
  failed += check_matmul(random, cpu::WeightType::f32, 33, 100, 1);
  failed += check_rmsnorm(random, pool);
  // A prefill batch across chunk boundaries, then decode steps and a smaller
  // batch on its scratch; heads that split the block's threads into groups,
  // one that does not, one wider, one too narrow for vector loads.
  failed += check_attention(random, pool, {{7, 250}, {1, 700}, {1, 701}, {3, 100}}, 64);
  failed += check_attention(random, pool, {{1, 300}}, 8);
  failed += check_attention(random, pool, {{3, 100}, {1, 103}}, 48);
  failed += check_attention(random, pool, {{1, 130}}, 160);
  failed += check_attention(random, pool, {{2, 40}, {1, 42}}, 2);
  return failed;
}

}  // namespace accord::cuda
