// accord bench: this machine's memory bandwidth, then decode and prefill
// tokens per second per precision, and how near decode comes to the limit
// the bandwidth sets, as llama-bench reports for llama.cpp.
#include <stdlib.h>  // mkdtemp

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <system_error>
#include <thread>

#include "apps/accord/commands.hpp"
#include "apps/accord/model_files.hpp"
#include "apps/accord/options.hpp"
#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/model/gguf_model.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/synthetic.hpp"
#include "runtime/session/session.hpp"
#include "runtime/text/sampler.hpp"

namespace accord::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchArgs {
  std::string model;
  std::string shape = "110m";
  std::vector<std::string> precisions = {"f32", "f16", "q8_0", "q4_0"};
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int repetitions = 3;
  int decode_tokens = 64;
  int prefill_tokens = 128;
  bool json = false;
};

// The synthetic shapes of --shape (dim, hidden, layers, heads, kv heads,
// vocab, seq), as in bench/README.md.
const std::map<std::string, ModelConfig>& shapes() {
  static const std::map<std::string, ModelConfig> table = {
      {"15m", {288, 768, 6, 6, 6, 32000, 256}},
      {"110m", {768, 2048, 12, 12, 12, 32000, 1024}},
  };
  return table;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// STREAM's triad, a[i] = b[i] + s * c[i], over three arrays of 128 MiB:
// 384 MiB, at least four times the last-level cache of today's CPUs, so
// every pass comes from memory. Bytes counted as STREAM counts them: b and c read, a written.
constexpr std::size_t kStreamArrayBytes = std::size_t{128} << 20;
constexpr int kStreamPasses = 5;
constexpr std::size_t kStreamChunk = 1 << 16;

// The best of kStreamPasses triads on `pool`, in GB/s (1e9 bytes).
double stream_triad_gb_per_s(cpu::ThreadPool& pool) {
  const std::size_t n = kStreamArrayBytes / sizeof(float);
  const auto a = std::make_unique_for_overwrite<float[]>(n);
  const auto b = std::make_unique_for_overwrite<float[]>(n);
  const auto c = std::make_unique_for_overwrite<float[]>(n);
  // Each thread touches its own chunk first, so its pages are placed near it.
  const auto fill = [&](std::size_t begin, std::size_t end) {
    std::fill(a.get() + begin, a.get() + end, 0.0f);
    std::fill(b.get() + begin, b.get() + end, 1.0f);
    std::fill(c.get() + begin, c.get() + end, 2.0f);
  };
  pool.parallel_for(n, fill, kStreamChunk);
  const auto triad = [&](std::size_t begin, std::size_t end) {
    float* __restrict out = a.get();
    const float* __restrict x = b.get();
    const float* __restrict y = c.get();
    for (std::size_t i = begin; i < end; ++i) out[i] = x[i] + 3.0f * y[i];
  };
  double best = std::numeric_limits<double>::infinity();
  for (int pass = 0; pass < kStreamPasses; ++pass) {
    const auto start = Clock::now();
    pool.parallel_for(n, triad, kStreamChunk);
    best = std::min(best, seconds_since(start));
  }
  return 3.0 * static_cast<double>(kStreamArrayBytes) / best / 1e9;
}

// "model name" of /proc/cpuinfo, or "unknown".
std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    const auto colon = line.find(':');
    if (!line.starts_with("model name") || colon == std::string::npos) continue;
    const auto value = line.find_first_not_of(" \t", colon + 1);
    if (value != std::string::npos) return line.substr(value);
  }
  return "unknown";
}

std::uint64_t stored_bytes(const Model& model) {
  std::uint64_t bytes = 0;
  for (const StoredTensor& t : model.tensors()) bytes += t.bytes;
  return bytes;
}

// The type most of the model's matrices (tensors of two dimensions or
// more) are stored as: "F32", "F16", "Q8_0" or "Q4_0".
std::string model_precision(const Model& model) {
  std::map<std::string, int> counts;
  for (const StoredTensor& t : model.tensors()) {
    if (t.shape.size() >= 2) ++counts[t.type];
  }
  const auto most =
      std::max_element(counts.begin(), counts.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
  return most == counts.end() ? "unknown" : most->first;
}

// Token ids for the timed runs, spread over the vocabulary; no tokenizer
// is needed.
std::vector<int> bench_tokens(int count, int vocab_size) {
  std::vector<int> tokens(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) tokens[i] = static_cast<int>((i * 7919LL + 1) % vocab_size);
  return tokens;
}

// One prompt token, then `count` greedy decode steps, timed.
Result<double> decode_rate(Session& session, int count) {
  if (Status reset = session.reset(); !reset) return reset.error();
  auto step = session.prefill(bench_tokens(1, session.model().config().vocab_size));
  if (!step) return step.error();
  int token = argmax(step->logits);
  const auto start = Clock::now();
  for (int i = 0; i < count; ++i) {
    step = session.decode(token);
    if (!step) return step.error();
    token = argmax(step->logits);
  }
  return count / seconds_since(start);
}

// `prompt` as one prefill from position 0, timed.
Result<double> prefill_rate(Session& session, const std::vector<int>& prompt) {
  if (Status reset = session.reset(); !reset) return reset.error();
  const auto start = Clock::now();
  if (auto step = session.prefill(prompt); !step) return step.error();
  return static_cast<double>(prompt.size()) / seconds_since(start);
}

// The median of `repetitions` runs of `run`.
Result<double> median_of(int repetitions, const std::function<Result<double>()>& run) {
  std::vector<double> rates;
  for (int i = 0; i < repetitions; ++i) {
    auto rate = run();
    if (!rate) return rate.error();
    rates.push_back(*rate);
  }
  std::sort(rates.begin(), rates.end());
  const std::size_t mid = rates.size() / 2;
  return rates.size() % 2 == 1 ? rates[mid] : (rates[mid - 1] + rates[mid]) / 2;
}

// Whether the timed runs fit the context of a model of `config`.
Status check_context(const ModelConfig& config, const BenchArgs& args) {
  const int needed = std::max(1 + args.decode_tokens, args.prefill_tokens);
  if (needed <= config.seq_len) return {};
  return Error(ErrorCode::contract, "--decode-tokens " + std::to_string(args.decode_tokens) +
                                        " (after one prompt token) and --prefill-tokens " +
                                        std::to_string(args.prefill_tokens) + " need " + std::to_string(needed) +
                                        " positions; the model's context is " + std::to_string(config.seq_len));
}

// One line of the results: a test of one model.
struct BenchRow {
  std::string precision;
  std::uint64_t weights_bytes = 0;  // all tensors, as stored
  std::string test;                 // "tg64", "pp128"
  double tokens_per_second = 0;
  // Decode only: bytes read per token (weights; KV cache at the average
  // position) and the tokens/s the bandwidth allows for the weights.
  std::optional<std::uint64_t> weight_bytes_per_token;
  std::optional<std::uint64_t> kv_bytes_per_token;
  std::optional<double> limit;
};

using RowSink = std::function<void(const BenchRow&)>;

BenchRow row_of(const Model& model, std::string test, double tokens_per_second) {
  BenchRow row;
  row.precision = model_precision(model);
  row.weights_bytes = stored_bytes(model);
  row.test = std::move(test);
  row.tokens_per_second = tokens_per_second;
  return row;
}

// The KV cache rows decode reads on average: token i (0-based) runs at
// position 1 + i and reads rows 0 to 1 + i.
std::uint64_t decode_kv_bytes(const Session& session, const ModelConfig& c, int decode_tokens) {
  const std::uint64_t per_row =
      session.materialization_report().kv_allocated_bytes / static_cast<std::uint64_t>(c.seq_len);
  return per_row * static_cast<std::uint64_t>(decode_tokens + 3) / 2;
}

constexpr int kWarmUpTokens = 4;

// Decode and prefill rates of `model`, as rows for `sink`.
Status bench_model(const Model& model, const BenchArgs& args, cpu::ThreadPool& pool, double bandwidth,
                   const RowSink& sink) {
  Session session(model, pool);
  // Untimed: wakes the pool and brings the first weights into the caches.
  if (auto warm = decode_rate(session, std::min(args.decode_tokens, kWarmUpTokens)); !warm) return warm.error();
  auto decode = median_of(args.repetitions, [&] { return decode_rate(session, args.decode_tokens); });
  if (!decode) return decode.error();
  const auto prompt = bench_tokens(args.prefill_tokens, model.config().vocab_size);
  auto prefill = median_of(args.repetitions, [&] { return prefill_rate(session, prompt); });
  if (!prefill) return prefill.error();
  BenchRow tg = row_of(model, "tg" + std::to_string(args.decode_tokens), *decode);
  tg.weight_bytes_per_token = decode_weight_bytes(model);
  tg.kv_bytes_per_token = decode_kv_bytes(session, model.config(), args.decode_tokens);
  tg.limit = bandwidth * 1e9 / static_cast<double>(*tg.weight_bytes_per_token);
  sink(tg);
  sink(row_of(model, "pp" + std::to_string(args.prefill_tokens), *prefill));
  return {};
}

// A fresh folder under TMPDIR (else /tmp), removed with what it holds when
// the object goes away, on errors and exceptions too.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "accord-bench-XXXXXX").string();
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  bool made() const { return !path_.empty(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// The synthetic model of `config` in f32, as `accord synth` writes it
// (seed 1), loaded.
Result<Model> write_base_model(const ScratchDir& dir, const ModelConfig& config) {
  SyntheticModelOptions options;
  options.config = config;
  const std::string path = dir.file("base.bin");
  if (Status written = write_synthetic_model(path, options); !written) return written.error();
  return Model::load(path);
}

// `base` converted to `precision` as `accord convert --type` converts it,
// then benchmarked; the converted file is removed afterwards.
Status bench_converted(const Model& base, const std::string& precision, const ScratchDir& dir, const BenchArgs& args,
                       cpu::ThreadPool& pool, double bandwidth, const RowSink& sink) {
  const std::string path = dir.file(precision + ".gguf");
  const gguf::TensorType type = matrix_types().at(precision);
  if (Status written = write_gguf_model(path, base, llama_metadata(base.config()), type); !written) return written;
  Status benched = [&]() -> Status {
    auto model = Model::load(path);
    if (!model) return model.error();
    return bench_model(*model, args, pool, bandwidth, sink);
  }();
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
  return benched;
}

Status bench_synthetic(const BenchArgs& args, cpu::ThreadPool& pool, double bandwidth, const RowSink& sink) {
  ScratchDir dir;
  if (!dir.made()) {
    return Error(ErrorCode::io,
                 "cannot create a temporary folder in " + std::filesystem::temp_directory_path().string());
  }
  auto base = write_base_model(dir, shapes().at(args.shape));
  if (!base) return base.error();
  for (const std::string& precision : args.precisions) {
    if (Status done = bench_converted(*base, precision, dir, args, pool, bandwidth, sink); !done) return done;
  }
  return {};
}

std::string describe(const ModelConfig& c) {
  return "dim " + std::to_string(c.dim) + ", hidden " + std::to_string(c.hidden_dim) + ", layers " +
         std::to_string(c.n_layers) + ", heads " + std::to_string(c.n_heads) + ", kv heads " +
         std::to_string(c.n_kv_heads) + ", vocab " + std::to_string(c.vocab_size) + ", seq " +
         std::to_string(c.seq_len);
}

// What the results are of, for the heading: the model file, or the shape.
std::string model_label(const BenchArgs& args) {
  if (!args.model.empty()) return args.model;
  return "synthetic " + args.shape + " (" + describe(shapes().at(args.shape)) + ")";
}

// The table of llama-bench's markdown output, printed row by row.
void print_heading(const BenchArgs& args, double bandwidth) {
  std::printf("cpu: %s (%s kernels)\n", cpu_model_name().c_str(), cpu::to_string(cpu::active_isa()));
  std::printf("memory bandwidth: %.2f GB/s (STREAM triad, 3 x %zu MiB, %d threads, best of %d)\n", bandwidth,
              kStreamArrayBytes >> 20, args.threads, kStreamPasses);
  std::printf("model: %s\n\n", model_label(args).c_str());
  std::printf("| precision | weights MiB | threads | test  |     tok/s | bandwidth limit tok/s | of limit |\n");
  std::printf("| --------- | ----------: | ------: | ----- | --------: | --------------------: | -------: |\n");
  std::fflush(stdout);
}

void print_row(const BenchRow& row, int threads) {
  char limit[32] = "-", share[32] = "-";
  if (row.limit) {
    std::snprintf(limit, sizeof limit, "%.2f", *row.limit);
    std::snprintf(share, sizeof share, "%.1f%%", 100.0 * row.tokens_per_second / *row.limit);
  }
  std::printf("| %-9s | %11.2f | %7d | %-5s | %9.2f | %21s | %8s |\n", row.precision.c_str(),
              static_cast<double>(row.weights_bytes) / (1 << 20), threads, row.test.c_str(), row.tokens_per_second,
              limit, share);
  std::fflush(stdout);
}

template <class T>
nlohmann::json or_null(const std::optional<T>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

nlohmann::json to_json(const BenchRow& row) {
  const nlohmann::json fraction = row.limit ? nlohmann::json(row.tokens_per_second / *row.limit) : nullptr;
  return {{"precision", row.precision},
          {"weights_bytes", row.weights_bytes},
          {"test", row.test},
          {"tokens_per_second", row.tokens_per_second},
          {"bandwidth_limit_tokens_per_second", or_null(row.limit)},
          {"fraction_of_limit", fraction},
          {"weight_bytes_per_token", or_null(row.weight_bytes_per_token)},
          {"kv_bytes_per_token", or_null(row.kv_bytes_per_token)}};
}

nlohmann::json json_heading(const BenchArgs& args, double bandwidth) {
  return {{"cpu", cpu_model_name()},           {"kernel_path", cpu::to_string(cpu::active_isa())},
          {"bandwidth_gb_per_s", bandwidth},   {"threads", args.threads},
          {"model", model_label(args)},        {"repetitions", args.repetitions},
          {"results", nlohmann::json::array()}};
}

int run_bench(BenchArgs args) {
  args.threads = capped_threads(args.threads);
  std::optional<Model> model;
  if (!args.model.empty()) {
    auto loaded = Model::load(args.model);
    if (!loaded) return fail(loaded.error().message());
    model.emplace(std::move(*loaded));
  }
  if (Status fits = check_context(model ? model->config() : shapes().at(args.shape), args); !fits) {
    return fail(fits.error().message());
  }
  cpu::ThreadPool pool(args.threads);
  const double bandwidth = stream_triad_gb_per_s(pool);
  nlohmann::json json = json_heading(args, bandwidth);
  if (!args.json) print_heading(args, bandwidth);
  const RowSink sink = [&](const BenchRow& row) {
    if (args.json) {
      json["results"].push_back(to_json(row));
    } else {
      print_row(row, args.threads);
    }
  };
  const Status done =
      model ? bench_model(*model, args, pool, bandwidth, sink) : bench_synthetic(args, pool, bandwidth, sink);
  if (!done) return fail(done.error().message());
  if (args.json) std::cout << json.dump(2) << std::endl;
  return 0;
}

// --precision's names: those of matrix_types().
CLI::Validator precision_name() {
  return CLI::Validator(
      [](std::string& name) {
        if (matrix_types().contains(name)) return std::string();
        std::string known;
        for (const std::string& n : matrix_type_names()) known += (known.empty() ? "" : ", ") + n;
        return "unknown precision '" + name + "': expected a comma-separated list of " + known;
      },
      "PRECISION");
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Measure memory bandwidth, then decode and prefill tokens/s per precision against the bandwidth limit");
  CLI::Option* model =
      cmd->add_option("--model", args->model, "bench this model (GGUF or llama2.c) instead of synthetic ones");
  cmd->add_option("--shape", args->shape, "synthetic model shape: 110m or 15m")
      ->check(CLI::IsMember(shapes()))
      ->excludes(model)
      ->capture_default_str();
  cmd->add_option("--precision", args->precisions, "synthetic model precisions, comma-separated")
      ->delimiter(',')
      ->check(precision_name())
      ->excludes(model)
      ->capture_default_str();
  cmd->add_option(
         "--threads", args->threads,
         "CPU threads, at most " + std::to_string(cpu::kThreadsPerCore) + " per core (more are capped, with a warning)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--repetitions", args->repetitions, "runs of each test; the median is reported")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--decode-tokens", args->decode_tokens, "decode steps timed per run (the tgN test)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--prefill-tokens", args->prefill_tokens, "prompt tokens of the timed prefill (the ppN test)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "print one JSON object instead of the table");
  return [args] { return run_bench(*args); };
}

}  // namespace accord::cli
