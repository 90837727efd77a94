// cpu::matmul at the projection shapes of a 110M-class model (dim 768,
// hidden 2048): decode (batch 1) and prefill (batch 64), for every stored
// weight type, on 1 and 2 threads, on the path isa.hpp chose
// (ACCORD_CPU_PATH forces one).
//
// Decode reads every weight once per token and is bound by memory bandwidth,
// so bytes/s (weight bytes read) is its figure; prefill reuses each weight
// row for 64 tokens and is bound by arithmetic, so FLOP/s is.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/aligned.hpp"
#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/quant.hpp"
#include "kernels/cpu/thread_pool.hpp"

namespace {

// ACCORD_CPU_PATH forces a path here as it does for `accord`.
[[maybe_unused]] const bool forced_path = [] {
  const char* path = std::getenv("ACCORD_CPU_PATH");
  if (path == nullptr) return false;
  if (const std::string refused = accord::cpu::use_isa(path); !refused.empty()) {
    std::fprintf(stderr, "ACCORD_CPU_PATH: %s\n", refused.c_str());
    std::exit(2);
  }
  return true;
}();

using accord::cpu::WeightType;

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// The bytes of `values` stored as `type`.
std::vector<std::byte> stored(WeightType type, const std::vector<float>& values) {
  std::vector<std::byte> bytes(accord::cpu::row_bytes(type, values.size()));
  accord::cpu::quantize_values(type, bytes.data(), values.data(), values.size());
  return bytes;
}

// Args: weight type (WeightType's value), batch, rows (output width),
// threads. The input width is always 768.
void BM_matmul(benchmark::State& state) {
  const auto type = static_cast<WeightType>(state.range(0));
  const int batch = static_cast<int>(state.range(1));
  const int rows = static_cast<int>(state.range(2));
  const int threads = static_cast<int>(state.range(3));
  const int cols = 768;

  accord::cpu::ThreadPool pool(threads);
  const auto values = random_floats(static_cast<std::size_t>(batch) * cols, 1);
  const accord::cpu::AlignedVector<float> x(values.begin(), values.end());
  const std::vector<std::byte> w = stored(type, random_floats(static_cast<std::size_t>(rows) * cols, 2));
  const accord::cpu::Matrix matrix{type, w.data(), rows, cols};
  std::vector<float> out(static_cast<std::size_t>(batch) * rows);

  for (auto _ : state) {
    accord::cpu::matmul(pool, out.data(), x.data(), matrix, batch);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }

  state.SetLabel(accord::cpu::to_string(type));
  // Shown as FLOP=<n>G/s: the library appends "/s" and an SI prefix to rates.
  state.counters["FLOP"] = benchmark::Counter(2.0 * batch * rows * cols, benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(w.size()));
}

// Real time, not CPU time: CPU time counts the calling thread only, which
// would flatter the 2-thread runs.
BENCHMARK(BM_matmul)
    ->ArgNames({"type", "batch", "rows", "threads"})
    ->ArgsProduct({{0, 1, 2, 3}, {1, 64}, {768, 2048}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
// BF16, the K-quants (Q2_K .. Q6_K), IQ4_XS, Q4_1, Q5_0, Q5_1 and IQ4_NL: a
// decode step's product on one thread, and a prefill batch.
BENCHMARK(BM_matmul)
    ->ArgNames({"type", "batch", "rows", "threads"})
    ->ArgsProduct({{0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, {1, 64}, {2048}, {1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
// A few rows at once (a serve batch, a speculative verification): Q8_0,
// Q4_0 and Q4_K on one thread, where each weight block should serve every
// row at about a prefill's rate (batch 8 against batch 1 is the figure).
BENCHMARK(BM_matmul)
    ->ArgNames({"type", "batch", "rows", "threads"})
    ->ArgsProduct({{2, 3, 7}, {2, 4, 8, 16}, {768, 2048}, {1}})
    ->Args({7, 1, 768, 1})  // the other batch-1 cases are in the sets above
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
