// The whole forward pass on a synthetic llama2.c model: decode (one token per
// step) and prefill (64 or 256 tokens as one batch), on 1 and 2 threads.
//
// Shapes: "15M" (dim 288) runs by default and takes seconds; "110M" (dim 768)
// is registered only when ACCORD_BENCH_110M=1. Each benchmark's name carries
// its shape, so --benchmark_filter=110M selects one. Model files are written
// on first use into one temporary directory, removed at exit.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "actors/distributed_session.hpp"
#include "bench/model_store.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/synthetic.hpp"
#include "runtime/model/transformer.hpp"
#include "runtime/session/session.hpp"

namespace {

using accord::bench::bench_shapes;
using accord::bench::model_or_skip;
using accord::bench::ModelStore;
using accord::bench::Shape;

// An arbitrary but fixed token id for position `pos`.
int token_at(int pos, int vocab_size) { return (pos * 7919 + 1) % vocab_size; }

// One token per iteration at positions 0, 1, ... Attention grows with the
// position, so the figure is an average over the positions reached; at the
// end of the context the position wraps to 0 and the cache is overwritten.
void BM_decode(benchmark::State& state, const Shape& shape) {
  const accord::Model* model = model_or_skip(state, shape);
  if (model == nullptr) return;
  const accord::ModelConfig& config = model->config();
  accord::cpu::ThreadPool pool(static_cast<int>(state.range(0)));
  accord::Transformer transformer(*model, pool);
  accord::KvCache kv(config, 0, config.n_layers);

  int pos = 0;
  for (auto _ : state) {
    const int token = token_at(pos, config.vocab_size);
    auto logits = transformer.forward(std::span<const int>(&token, 1), pos, kv);
    if (!logits) {
      state.SkipWithError(logits.error().message().c_str());
      break;
    }
    benchmark::DoNotOptimize(logits->data());
    pos = (pos + 1) % config.seq_len;
  }
  state.counters["tok"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}

// A prompt of state.range(0) tokens as one batch at position 0, per iteration.
void BM_prefill(benchmark::State& state, const Shape& shape) {
  const accord::Model* model = model_or_skip(state, shape);
  if (model == nullptr) return;
  const accord::ModelConfig& config = model->config();
  const int n_tokens = static_cast<int>(state.range(0));
  accord::cpu::ThreadPool pool(static_cast<int>(state.range(1)));
  accord::Transformer transformer(*model, pool);
  accord::KvCache kv(config, 0, config.n_layers);

  std::vector<int> prompt(static_cast<std::size_t>(n_tokens));
  for (int i = 0; i < n_tokens; ++i) prompt[static_cast<std::size_t>(i)] = token_at(i, config.vocab_size);

  for (auto _ : state) {
    auto logits = transformer.forward(prompt, 0, kv);
    if (!logits) {
      state.SkipWithError(logits.error().message().c_str());
      break;
    }
    benchmark::DoNotOptimize(logits->data());
  }
  state.counters["tok"] = benchmark::Counter(n_tokens, benchmark::Counter::kIsIterationInvariantRate);
}

// The 256-token prompt of the prompt-cache pair below.
std::vector<int> cache_prompt(const accord::ModelConfig& config) {
  std::vector<int> prompt(256);
  for (int i = 0; i < 256; ++i) prompt[static_cast<std::size_t>(i)] = token_at(i, config.vocab_size);
  return prompt;
}

// Cold: an empty session prefills all 256 tokens.
void BM_prompt_cold_prefill(benchmark::State& state, const Shape& shape) {
  const accord::Model* model = model_or_skip(state, shape);
  if (model == nullptr) return;
  accord::cpu::ThreadPool pool(static_cast<int>(state.range(0)));
  accord::Session session(*model, pool);
  const auto prompt = cache_prompt(model->config());
  for (auto _ : state) {
    if (!session.reset() || !session.prefill(prompt)) {
      state.SkipWithError("cold prefill failed");
      break;
    }
  }
  state.counters["tok"] = benchmark::Counter(256, benchmark::Counter::kIsIterationInvariantRate);
}

// Warm: the same logits from a cache holding the first 255 tokens (loaded,
// checked by SHA-256) and a one-token prefill of the last.
void BM_prompt_cache_load(benchmark::State& state, const Shape& shape) {
  const accord::Model* model = model_or_skip(state, shape);
  if (model == nullptr) return;
  accord::cpu::ThreadPool pool(static_cast<int>(state.range(0)));
  accord::Session session(*model, pool);
  const auto prompt = cache_prompt(model->config());
  const auto prefix = std::span<const int>(prompt).first(255);
  const auto root = ModelStore::instance().dir() / ("cache-" + shape.name);
  const accord::PromptCacheDescriptor descriptor{"bench", "bench"};
  if (!session.prefill(prefix) || !session.save_prompt_cache(root, descriptor, prefix)) {
    state.SkipWithError("saving the prompt cache failed");
    return;
  }
  for (auto _ : state) {
    if (!session.reset() || !session.load_prompt_cache(root, descriptor, prefix) ||
        !session.prefill(std::span<const int>(prompt).last(1))) {
      state.SkipWithError("cache load failed");
      break;
    }
  }
  state.counters["tok"] = benchmark::Counter(256, benchmark::Counter::kIsIterationInvariantRate);
}

// A distributed session of state.range(0) ranks over `model`, or nullptr
// after marking the benchmark skipped (also when the model is missing).
std::unique_ptr<accord::DistributedSession> distributed_or_skip(benchmark::State& state, const accord::Model* model) {
  if (model == nullptr) return nullptr;
  accord::DistributedOptions options;
  options.ranks = static_cast<int>(state.range(0));
  auto created = accord::DistributedSession::create(*model, options);
  if (!created) {
    state.SkipWithError(created.error().message().c_str());
    return nullptr;
  }
  return std::move(*created);
}

// One decode step at the session's position, after a reset once the
// context is full; false, with the benchmark marked failed, when either
// fails.
template <class Session, class Reset>
bool decode_step(benchmark::State& state, Session& session, const accord::Model& model, Reset reset) {
  if (session.position() == model.config().seq_len && !reset()) {
    state.SkipWithError("reset failed");
    return false;
  }
  auto step = session.decode(token_at(session.position(), model.config().vocab_size));
  if (!step) {
    state.SkipWithError(step.error().message().c_str());
    return false;
  }
  return true;
}

// Decode through N in-process ranks of actors (sharing a pool of one thread): tok/s,
// and the protocol's share of a step (wall time the ranks did not compute).
void BM_distributed_decode(benchmark::State& state, const Shape& shape) {
  const accord::Model* model = model_or_skip(state, shape);
  auto created = distributed_or_skip(state, model);
  if (created == nullptr) return;
  accord::DistributedSession& session = *created;
  for (auto _ : state) {
    if (!decode_step(state, session, *model, [&] { return session.reset(); })) break;
  }
  const accord::DistributedStats stats = session.stats();
  state.counters["tok"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["protocol_us"] = stats.protocol_microseconds_per_step();
  state.counters["protocol_share"] = stats.protocol_share();
}

// The protocol alone: a checkpoint transaction computes nothing. Its three
// phases (SessionCheckpoint, with MechanismCompletion and Commit riding on
// it) take one round over every rank, plus the caller's one blocking call.
void BM_distributed_round(benchmark::State& state, const Shape& shape) {
  const accord::Model* model = model_or_skip(state, shape);
  auto created = distributed_or_skip(state, model);
  if (created == nullptr) return;
  accord::DistributedSession& session = *created;
  for (auto _ : state) {
    if (!session.checkpoint()) {
      state.SkipWithError("checkpoint failed");
      break;
    }
  }
  state.counters["phases_per_call"] =
      static_cast<double>(session.stats().phases_run) / static_cast<double>(state.iterations());
}

// Decode through the one-rank Session (the transaction engine over the
// direct transport): beside forward_decode, at the same threads, it shows
// what a transaction adds to a step.
void BM_session_decode(benchmark::State& state, const Shape& shape) {
  const accord::Model* model = model_or_skip(state, shape);
  if (model == nullptr) return;
  accord::cpu::ThreadPool pool(static_cast<int>(state.range(0)));
  accord::Session session(*model, pool);
  for (auto _ : state) {
    if (!decode_step(state, session, *model, [&] { return session.reset(); })) break;
  }
  state.counters["tok"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}

// The engine alone on one rank: a checkpoint transaction computes nothing.
void BM_session_round(benchmark::State& state, const Shape& shape) {
  const accord::Model* model = model_or_skip(state, shape);
  if (model == nullptr) return;
  accord::cpu::ThreadPool pool(1);
  accord::Session session(*model, pool);
  for (auto _ : state) {
    if (!session.checkpoint()) {
      state.SkipWithError("checkpoint failed");
      break;
    }
  }
}

bool register_forward_benchmarks() {
  const std::vector<Shape> shapes = bench_shapes();
  // Real time, not CPU time: CPU time counts the calling thread only.
  for (const Shape& shape : shapes) {
    benchmark::RegisterBenchmark(("forward_decode/" + shape.name).c_str(), BM_decode, shape)
        ->ArgName("threads")
        ->Arg(1)
        ->Arg(2)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("forward_prefill/" + shape.name).c_str(), BM_prefill, shape)
        ->ArgNames({"tokens", "threads"})
        ->ArgsProduct({{64, 256}, {1, 2}})
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("session_decode/" + shape.name).c_str(), BM_session_decode, shape)
        ->ArgName("threads")
        ->Arg(1)
        ->Arg(2)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("session_round/" + shape.name).c_str(), BM_session_round, shape)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("distributed_decode/" + shape.name).c_str(), BM_distributed_decode, shape)
        ->ArgName("ranks")
        ->Arg(1)
        ->Arg(2)
        ->Arg(4)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("distributed_round/" + shape.name).c_str(), BM_distributed_round, shape)
        ->ArgName("ranks")
        ->Arg(1)
        ->Arg(2)
        ->Arg(4)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    for (auto* bm : {benchmark::RegisterBenchmark(("prompt_cold_prefill_256/" + shape.name).c_str(),
                                                  BM_prompt_cold_prefill, shape),
                     benchmark::RegisterBenchmark(("prompt_cache_load_255_plus_1/" + shape.name).c_str(),
                                                  BM_prompt_cache_load, shape)}) {
      bm->ArgName("threads")->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
    }
  }
  return true;
}

// Registered at static initialisation, like the BENCHMARK macros, so that
// benchmark_main sees them.
[[maybe_unused]] const bool registered = register_forward_benchmarks();

}  // namespace
