// cpu::matmul at the projection shapes of a 110M-class model (dim 768,
// hidden 2048): decode (batch 1) and prefill (batch 64), on 1 and 2 threads.
//
// Decode reads every weight once per token and is bound by memory bandwidth,
// so bytes/s (weight bytes read) is its figure; prefill reuses each weight
// row for 64 tokens and is bound by arithmetic, so FLOP/s is.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/thread_pool.hpp"

namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// Args: batch, rows (output width), threads. The input width is always 768.
void BM_matmul(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  const int rows = static_cast<int>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  const int cols = 768;

  accord::cpu::ThreadPool pool(threads);
  const std::vector<float> x = random_floats(static_cast<std::size_t>(batch) * cols, 1);
  const std::vector<float> w = random_floats(static_cast<std::size_t>(rows) * cols, 2);
  std::vector<float> out(static_cast<std::size_t>(batch) * rows);
  const auto matrix = accord::cpu::Matrix::of_floats(w.data(), rows, cols);

  for (auto _ : state) {
    accord::cpu::matmul(pool, out.data(), x.data(), matrix, batch);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }

  // Shown as FLOP=<n>G/s: the library appends "/s" and an SI prefix to rates.
  state.counters["FLOP"] = benchmark::Counter(2.0 * batch * rows * cols, benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(w.size() * sizeof(float)));
}

// Real time, not CPU time: CPU time counts the calling thread only, which
// would flatter the 2-thread runs.
BENCHMARK(BM_matmul)
    ->ArgNames({"batch", "rows", "threads"})
    ->ArgsProduct({{1, 64}, {768, 2048}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
