// Speculative decoding end to end: generate() with greedy decoding, plain
// and with a drafter, on the same target and prompt. Each iteration is one
// whole generation on a fresh session; the figures are the decode phase's
// (the prefill is the same for all): `tok_s` (tokens the decode steps
// produced per second of decoding), `acceptance` (accepted / drafted
// tokens), `tokens_per_step`. The speed-up is the ratio of tok_s between
// rows of one run.
//
// stories260K (../shared/models, or ACCORD_SHARED) with prompt lookup runs
// by default. With ACCORD_BENCH_110M=1: a synthetic 110M target, plain,
// with prompt lookup (also after a repetitive prompt, where more of its
// guesses are accepted), and with two draft models: the same synthetic weights
// cut to their first 2 layers (the writer draws each tensor kind from one
// stream, layer after layer, so a model of the same seed and fewer layers
// is the target's early exit), and an unrelated 15M-class synthetic model
// of the same vocabulary.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "actors/distributed_session.hpp"
#include "bench/model_store.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/generate/drafter.hpp"
#include "runtime/generate/generator.hpp"
#include "runtime/model/synthetic.hpp"
#include "runtime/text/synthetic_tokenizer.hpp"
#include "runtime/text/tokenizer.hpp"

namespace {

using namespace accord;

std::filesystem::path shared_models() {
  const char* shared = std::getenv("ACCORD_SHARED");
  return std::filesystem::path(shared != nullptr ? shared : ACCORD_SHARED_DIR) / "models";
}

// stories260K, loaded once.
const Model* stories_model(std::string& error) {
  static const Result<Model> model = Model::load((shared_models() / "stories260K.bin").string());
  if (!model) {
    error = model.error().message();
    return nullptr;
  }
  return &*model;
}

// How a run finds its models: the target and, for a draft-model run, the draft.
struct Run {
  std::function<const Model*(std::string&)> target;
  std::function<const Model*(std::string&)> draft;  // empty: no draft model
  bool lookup = false;
  std::string prompt;
  int max_tokens = 0;
  bool real_tokenizer = false;  // stories260K's tok512.bin, or a synthetic one
};

void BM_speculative_generation(benchmark::State& state, const Run& run) {
  std::string error;
  const Model* target = run.target(error);
  const Model* draft = target != nullptr && run.draft ? run.draft(error) : nullptr;
  if (target == nullptr || (run.draft && draft == nullptr)) {
    state.SkipWithError(error.c_str());
    return;
  }
  auto tokenizer = run.real_tokenizer ? Tokenizer::load((shared_models() / "tok512.bin").string())
                                      : synthetic_tokenizer(target->config().vocab_size);
  if (!tokenizer) {
    state.SkipWithError(tokenizer.error().message().c_str());
    return;
  }
  cpu::ThreadPool pool(1);
  std::unique_ptr<Drafter> drafter;
  if (run.lookup) drafter = std::make_unique<PromptLookupDrafter>();
  if (draft != nullptr) drafter = std::make_unique<ModelDrafter>(*draft, 1);
  GenerationOptions options;
  options.max_tokens = run.max_tokens;
  options.sampler.temperature = 0.0f;
  options.drafter = drafter.get();
  options.draft_tokens = static_cast<int>(state.range(0));
  double seconds = 0;
  long decoded = 0, drafted = 0, accepted = 0, steps = 0;
  for (auto _ : state) {
    Session session(*target, pool);
    auto result = generate(session, *tokenizer, run.prompt, options);
    if (!result) {
      state.SkipWithError(result.error().message().c_str());
      return;
    }
    state.SetIterationTime(result->decode_seconds);
    seconds += result->decode_seconds;
    decoded += result->decoded_tokens();
    drafted += result->drafted_tokens;
    accepted += result->accepted_tokens;
    steps += result->decode_steps;
  }
  state.counters["tok_s"] = static_cast<double>(decoded) / seconds;
  state.counters["acceptance"] = drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
  state.counters["tokens_per_step"] = static_cast<double>(decoded) / static_cast<double>(steps);
}

// Registers `run` with each draft length (0: plain decoding).
void add(const std::string& name, const Run& run, std::initializer_list<int> draft_tokens) {
  auto* bm = benchmark::RegisterBenchmark(("speculative_generation/" + name).c_str(), BM_speculative_generation, run)
                 ->ArgName("draft_tokens")
                 ->UseManualTime()
                 ->Unit(benchmark::kMillisecond);
  for (int k : draft_tokens) bm->Arg(k);
}

bool register_speculative_benchmarks() {
  Run stories;
  stories.target = stories_model;
  stories.prompt = "Once upon a time";
  stories.max_tokens = 256;
  stories.real_tokenizer = true;
  add("stories260K/plain", stories, {0});
  stories.lookup = true;
  add("stories260K/lookup", stories, {4, 8});

  if (const char* v = std::getenv("ACCORD_BENCH_110M"); v == nullptr || std::string_view(v) != "1") return true;
  const bench::Shape big = bench::make_shape("110M", 768, 2048, 12, 12, 12, 32000, 1024);
  const bench::Shape early_exit = bench::make_shape("110M-first-2-layers", 768, 2048, 2, 12, 12, 32000, 1024);
  const bench::Shape small = bench::make_shape("15M-1024", 288, 768, 6, 6, 6, 32000, 1024);
  auto synthetic_model = [](const bench::Shape& shape) {
    return [shape](std::string& error) { return bench::ModelStore::instance().get(shape, error); };
  };
  Run synthetic;
  synthetic.target = synthetic_model(big);
  synthetic.prompt = "The quick brown fox";
  synthetic.max_tokens = 256;
  add("110M/plain", synthetic, {0});
  Run lookup = synthetic;
  lookup.lookup = true;
  add("110M/lookup", lookup, {2, 3, 4, 8});
  // Repetitive text, where prompt lookup's guesses are accepted more often.
  Run repetitive = synthetic;
  repetitive.prompt = "1 2 3 1 2 3 1 2 3 1 2 3";
  repetitive.max_tokens = 128;
  add("110M_repetitive_prompt/plain", repetitive, {0});
  repetitive.lookup = true;
  add("110M_repetitive_prompt/lookup", repetitive, {3, 4});
  Run exit_draft = synthetic;
  exit_draft.draft = synthetic_model(early_exit);
  add("110M/draft_model:first_2_layers", exit_draft, {4});
  Run unrelated = synthetic;
  unrelated.draft = synthetic_model(small);
  add("110M/draft_model:unrelated_15M", unrelated, {4});
  return true;
}

[[maybe_unused]] const bool registered = register_speculative_benchmarks();

}  // namespace
