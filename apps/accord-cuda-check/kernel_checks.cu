#include "apps/accord-cuda-check/kernel_checks.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
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
  if (type == cpu::WeightType::f32) std::copy_n(reinterpret_cast<const std::byte*>(values.data()), bytes.size(), bytes.data());
  if (type == cpu::WeightType::f16) cpu::quantize_f16(bytes.data(), values.data(), values.size());
  if (type == cpu::WeightType::q8_0) cpu::quantize_q8_0(bytes.data(), values.data(), values.size());
  return bytes;
}

// Against the weights dequantized and a double-precision dot product: the
// CPU's Q8_0 product quantizes its input too, so it is not the reference.
int check_matmul(std::mt19937& random, cpu::WeightType type, int rows, int cols, int batch) {
  const std::vector<std::byte> bytes = stored(type, random_floats(random, static_cast<std::size_t>(rows) * cols));
  const cpu::Matrix host{type, bytes.data(), rows, cols};
  std::vector<float> weights(static_cast<std::size_t>(rows) * cols);
  cpu::dequantize(host, weights.data());
  const std::vector<float> x = random_floats(random, static_cast<std::size_t>(batch) * cols);
  std::vector<float> want(static_cast<std::size_t>(batch) * rows);
  for (int t = 0; t < batch; ++t) {
    for (int r = 0; r < rows; ++r) {
      double sum = 0.0;
      for (int c = 0; c < cols; ++c) sum += static_cast<double>(weights[static_cast<std::size_t>(r) * cols + c]) * x[static_cast<std::size_t>(t) * cols + c];
      want[static_cast<std::size_t>(t) * rows + r] = static_cast<float>(sum);
    }
  }
  Uploads device;
  const DeviceMatrix w{type, device.copy(bytes), rows, cols};
  float* out = device.zeros<float>(want.size());
  matmul(nullptr, out, device.copy(x), w, batch);
  return report(std::string("matmul ") + cpu::to_string(type) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                    " batch " + std::to_string(batch),
                download(out, want.size()), want, 1e-5);
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

int check_norms(std::mt19937& random, cpu::ThreadPool& pool) {
  const int rows = 3, n = 300;
  const std::vector<float> x = random_floats(random, rows * n), delta = random_floats(random, rows * n);
  const std::vector<float> weight = random_floats(random, n);
  std::vector<float> want(x.size()), summed = x, want_norm(x.size());
  cpu::rmsnorm_rows(pool, want.data(), x.data(), weight.data(), rows, n, 1e-5f);
  cpu::add_rmsnorm_rows(pool, summed.data(), delta.data(), want_norm.data(), weight.data(), rows, n, 1e-5f);
  Uploads device;
  float* dx = device.copy(x);
  float* out = device.zeros<float>(x.size());
  rmsnorm(nullptr, out, dx, device.copy(weight), rows, n, 1e-5f);
  int failed = report("rmsnorm", download(out, x.size()), want, 1e-5);
  add_rmsnorm(nullptr, dx, device.copy(delta), out, device.copy(weight), rows, n, 1e-5f);
  failed += report("add_rmsnorm: the sum", download(dx, x.size()), summed, 1e-6);
  failed += report("add_rmsnorm: the norm", download(out, x.size()), want_norm, 1e-5);
  return failed;
}

int check_elementwise(std::mt19937& random) {
  const std::size_t count = 1000;
  std::vector<float> gate = random_floats(random, count, 8.0f), up = random_floats(random, count);
  Uploads device;
  float* dgate = device.copy(gate);
  silu_mul(nullptr, dgate, device.copy(up), count);
  cpu::silu_mul(gate.data(), up.data(), static_cast<int>(count));
  int failed = report("silu_mul", download(dgate, count), gate, 1e-5);
  std::vector<float> x = random_floats(random, count), delta = random_floats(random, count);
  float* dx = device.copy(x);
  add(nullptr, dx, device.copy(delta), count);
  for (std::size_t i = 0; i < count; ++i) x[i] += delta[i];
  failed += report("add", download(dx, count), x, 0.0);
  return failed;
}

int check_rope(std::mt19937& random) {
  const int seq_len = 64, heads = 4, head_size = 16, rows = 5, first_pos = 40, half = head_size / 2;
  std::vector<float> cos(static_cast<std::size_t>(seq_len) * half), sin(cos.size());
  cpu::rope_tables(cos.data(), sin.data(), seq_len, head_size, 10000.0f);
  std::vector<float> v = random_floats(random, static_cast<std::size_t>(rows) * heads * head_size);
  Uploads device;
  float* dv = device.copy(v);
  rope(nullptr, dv, rows, heads, head_size, first_pos, device.copy(cos), device.copy(sin));
  for (int t = 0; t < rows; ++t) {
    const std::size_t angle = static_cast<std::size_t>(first_pos + t) * half;
    cpu::rope(&v[static_cast<std::size_t>(t) * heads * head_size], heads, head_size, &cos[angle], &sin[angle]);
  }
  return report("rope", download(dv, v.size()), v, 1e-6);
}

// A prefill batch across a chunk boundary, and a decode step three chunks in.
int check_attention(std::mt19937& random, cpu::ThreadPool& pool, int rows, int first_pos) {
  const int n_heads = 8, n_kv_heads = 2, head_size = 64, seq_len = 1024;
  const int kv_dim = n_kv_heads * head_size, q_dim = n_heads * head_size;
  const std::vector<float> keys = random_floats(random, static_cast<std::size_t>(seq_len) * kv_dim);
  const std::vector<float> values = random_floats(random, keys.size());
  const std::vector<float> q = random_floats(random, static_cast<std::size_t>(rows) * q_dim, 2.0f);
  std::vector<float> want(q.size());
  cpu::attention(pool, want.data(), q.data(), {keys.data(), values.data(), kv_dim}, rows, first_pos, n_heads,
                 n_kv_heads, head_size);
  Uploads device;
  float* out = device.zeros<float>(q.size());
  float* scratch = device.zeros<float>(attention_scratch_floats(rows, n_heads, head_size, seq_len));
  attention(nullptr, out, device.copy(q), device.copy(keys), device.copy(values), rows, first_pos, n_heads, n_kv_heads,
            head_size, scratch);
  return report("attention rows " + std::to_string(rows) + " from " + std::to_string(first_pos),
                download(out, q.size()), want, 1e-5);
}

}  // namespace

int run_kernel_checks() {
  ACCORD_CUDA_CHECK(cudaSetDevice(0));
  std::mt19937 random(18);
  cpu::ThreadPool pool(2);
  int failed = 0;
  for (cpu::WeightType type : {cpu::WeightType::f32, cpu::WeightType::f16, cpu::WeightType::q8_0}) {
    failed += check_matmul(random, type, 67, 96, 1);
    failed += check_matmul(random, type, 67, 96, 6);
    failed += check_embed(random, type);
  }
  // Widths the vector loads do not divide take the scalar loop.
  failed += check_matmul(random, cpu::WeightType::f32, 33, 102, 3);
  failed += check_matmul(random, cpu::WeightType::f16, 33, 102, 3);
  failed += check_norms(random, pool);
  failed += check_elementwise(random);
  failed += check_rope(random);
  failed += check_attention(random, pool, 7, 250);
  failed += check_attention(random, pool, 1, 700);
  return failed;
}

}  // namespace accord::cuda
