// accord-cuda-check: the CUDA backend against the CPU on one device, for
// scripts/gpu-check.sh (docs/gpu.md). Exit 0: every check passed; 1: a
// check failed or an error; 2: a wrong option, or no CUDA device.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "apps/accord-cuda-check/kernel_checks.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/device.hpp"
#include "runtime/model/cuda_transformer.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/transformer.hpp"
#include "runtime/model/weights.hpp"
#include "runtime/text/sampler.hpp"

namespace {

using accord::CudaTransformer;
using accord::Model;

constexpr int kNoDevice = 2;

int fail(const std::string& message) {
  std::fprintf(stderr, "accord-cuda-check: error: %s\n", message.c_str());
  return 1;
}

// Lists the devices; kNoDevice, with the reason, when there are none.
int devices() {
  const accord::cuda::DeviceQuery query = accord::cuda::query_devices();
  if (!query.error.empty()) {
    std::fprintf(stderr, "accord-cuda-check: %s\n", query.error.c_str());
    return kNoDevice;
  }
  for (const auto& device : query.devices) {
    std::printf("device %d: %s, %.1f GiB, compute capability %d.%d\n", device.index, device.name.c_str(),
                static_cast<double>(device.memory_bytes) / (1 << 30), device.compute_major, device.compute_minor);
  }
  return 0;
}

// A prompt as one batch, then greedy steps (`tokens` in all), on the CPU and on the
// device side by side: the logits within `tolerance` of the CPU's largest
// logit at every step, and the same tokens except where the CPU's best two
// logits tie within the tolerance.
int compare_with_cpu(const Model& model, int tokens, double tolerance, int threads) {
  auto device = CudaTransformer::create(model, accord::WeightScope::everything(), 0);
  if (!device) return fail(device.error().message());
  accord::cpu::ThreadPool pool(threads);
  accord::Transformer cpu(model, pool);
  accord::KvCache kv(model.config(), 0, model.config().n_layers);
  // BOS and a few more tokens as one batch (a prefill), then one at a time.
  std::vector<int> step{1};
  for (int i = 1; i < 9; ++i) step.push_back(i * 37 % model.config().vocab_size);
  int pos = 0, mismatches = 0, ties = 0;
  double worst = 0.0;
  for (int i = 0; i < tokens && pos + static_cast<int>(step.size()) <= model.config().seq_len; ++i) {
    auto want = cpu.forward(step, pos, kv);
    if (!want) return fail(want.error().message());
    auto got = (*device)->forward(step, pos);
    if (!got) return fail(got.error().message());
    const double scale = std::max(1e-12, accord::cuda::largest_magnitude(*want));
    worst = std::max(worst, accord::cuda::relative_error(*got, *want));
    const int expected = accord::argmax(*want), token = accord::argmax(*got);
    // Two logits of the CPU's closer than the tolerance are a tie that either side may break.
    const bool tie = token != expected && ((*want)[expected] - (*want)[token]) / scale <= tolerance;
    ties += tie ? 1 : 0;
    if (token != expected && !tie && mismatches++ == 0) {
      std::printf("first different token at step %d: CPU %d, CUDA %d\n", i, expected, token);
    }
    pos += static_cast<int>(step.size());
    step.assign(1, expected);  // both go on from the CPU's token, so one miss does not cascade
  }
  const bool ok = mismatches == 0 && worst <= tolerance;
  std::printf(
      "greedy tokens: %d different, %d ties; logits: largest difference %.3g of the largest logit "
      "(tolerance %.1g)  %s\n",
      mismatches, ties, worst, tolerance, ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

// Decode tokens/s on the device, and the weights' bytes read per second
// against `peak_gbs` (the device's HBM bandwidth, GB/s) when given.
int bench(const Model& model, int tokens, double peak_gbs) {
  auto device = CudaTransformer::create(model, accord::WeightScope::everything(), 0);
  if (!device) return fail(device.error().message());
  int token = 1;
  const int warmup = std::min(4, tokens);
  const int steps = std::min(tokens, model.config().seq_len - warmup);
  std::chrono::steady_clock::time_point start;
  for (int pos = 0; pos < warmup + steps; ++pos) {
    if (pos == warmup) start = std::chrono::steady_clock::now();
    auto logits = (*device)->forward({&token, 1}, pos);
    if (!logits) return fail(logits.error().message());
    token = accord::argmax(*logits);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double per_second = steps / seconds;
  const auto bytes = static_cast<double>(accord::decode_weight_bytes(model));
  const double gbs = bytes * per_second / 1e9;
  std::printf("decode: %d tokens, %.1f tok/s, weights %.1f MB a token, %.0f GB/s read", steps, per_second, bytes / 1e6,
              gbs);
  if (peak_gbs > 0) std::printf(", %.2f of %.0f GB/s", gbs / peak_gbs, peak_gbs);
  std::printf("\n");
  const accord::ModelConfig& c = model.config();
  accord::cuda::time_decode_kernels({model.weights().layers.front().wq.type, c.dim, c.hidden_dim, c.n_layers, c.n_heads,
                                     c.n_kv_heads, c.vocab_size, c.seq_len});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"accord-cuda-check: the CUDA kernels and forward pass against the CPU's"};
  app.require_subcommand(1);
  std::string model_path;
  int tokens = 64, threads = 2;
  double tolerance = 1e-3, peak_gbs = 0;
  app.add_subcommand("devices", "list the CUDA devices");
  app.add_subcommand("kernels", "each kernel against the CPU's on random inputs");
  CLI::App* model_cmd = app.add_subcommand("model", "a model's logits and greedy tokens against the CPU's");
  CLI::App* bench_cmd = app.add_subcommand("bench", "decode tokens/s and the weights' bandwidth");
  for (CLI::App* cmd : {model_cmd, bench_cmd}) {
    cmd->add_option("--model", model_path, "llama2.c .bin or GGUF model")->required();
    cmd->add_option("--tokens", tokens, "steps")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  }
  model_cmd->add_option("--tolerance", tolerance, "largest logit difference, of the largest logit")
      ->capture_default_str();
  model_cmd->add_option("--threads", threads, "CPU threads")->check(CLI::Range(1, 1024))->capture_default_str();
  bench_cmd->add_option("--peak-gbs", peak_gbs, "the device's memory bandwidth in GB/s, for the fraction");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kNoDevice;
  }
  if (const int listed = devices(); listed != 0 || app.got_subcommand("devices")) return listed;
  try {
    if (app.got_subcommand("kernels")) return accord::cuda::run_kernel_checks() == 0 ? 0 : 1;
    auto model = Model::load(model_path);
    if (!model) return fail(model.error().message());
    if (app.got_subcommand("model")) return compare_with_cpu(*model, tokens, tolerance, threads);
    return bench(*model, tokens, peak_gbs);
  } catch (const accord::cuda::CudaFailure& failure) {
    return fail(failure.what());
  }
}
