// What a rank pays to read and check its own tensors (docs/residency.md):
// Model::load of the whole model against the load of one rank's shard,
// which digests only the shard's tensors (on `threads` threads).
//
// model_load/SHAPE/rank:R/ranks:N/threads:T loads rank R's shard of the
// default partition over N ranks (Partition::by_weight); ranks:1 is the
// whole model. The file stays in the page cache between iterations, so the
// figure is the digest's cost, not the disk's. `bytes_per_second` counts
// the shard's weight bytes.
#include <benchmark/benchmark.h>

#include "bench/model_store.hpp"
#include "runtime/rank/partition.hpp"

namespace accord::bench {
namespace {

void BM_model_load(benchmark::State& state, const Shape& shape) {
  const Model* model = model_or_skip(state, shape);
  if (model == nullptr) return;
  const int rank = static_cast<int>(state.range(0)), ranks = static_cast<int>(state.range(1));
  const auto partition = Partition::by_weight(*model, ranks);
  if (!partition) {
    state.SkipWithError(partition.error().message().c_str());
    return;
  }
  const ModelLoad load{partition->scope(rank), static_cast<int>(state.range(2))};
  std::uint64_t bytes = 0;
  for (const auto& [type, n] : model->weight_bytes_by_type(load.scope)) bytes += n;
  for (auto _ : state) {
    auto shard = Model::load(model->path(), load);
    if (!shard) {
      state.SkipWithError(shard.error().message().c_str());
      break;
    }
    benchmark::DoNotOptimize(shard->tensor_digests().data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes) * state.iterations());
}

bool register_identity_benchmarks() {
  for (const Shape& shape : bench_shapes()) {
    auto* bm = benchmark::RegisterBenchmark(("model_load/" + shape.name).c_str(), BM_model_load, shape);
    bm->ArgNames({"rank", "ranks", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);
    bm->Args({0, 1, 1})->Args({0, 1, 2});
    for (int rank = 0; rank < 3; ++rank) bm->Args({rank, 3, 1})->Args({rank, 3, 2});
  }
  return true;
}

const bool registered = register_identity_benchmarks();

}  // namespace
}  // namespace accord::bench
