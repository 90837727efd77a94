// accord generate: load a model, generate text, stream it or report JSON.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "actors/distributed_session.hpp"
#include "apps/accord/commands.hpp"
#include "apps/accord/model_files.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/generate/generator.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/tokenizer.hpp"
#include "runtime/session/session.hpp"

namespace accord::cli {

namespace {

struct GenerateArgs {
  std::string model;
  std::string tokenizer;
  std::string prompt;
  int max_tokens = 256;
  float temperature = 1.0f;
  float top_p = 0.9f;
  std::uint64_t seed = 0;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool json = false;
  std::string prompt_cache;
  int ranks = 1;
};

nlohmann::json to_json(const SessionReport& r) {
  return {
      {"model_identity", r.model_identity},
      {"weights_bytes", r.weights_bytes},
      {"weights_resident_bytes", r.weights_resident_bytes},
      {"weights_residency", r.weights_residency},
      {"kv_bytes_used", r.kv_bytes_used},
      {"kv_bytes_capacity", r.kv_bytes_capacity},
      {"position", r.position},
      {"context", r.context},
      {"last_epoch", r.last_epoch},
      {"committed_epoch", r.committed_epoch},
      {"state_epoch", r.state_epoch},
      {"last_outcome", r.last_outcome},
      {"last_error", r.last_error},
      {"aborted_transactions", r.aborted_transactions},
      {"restoration_generation", r.restoration_generation},
      {"state_digest", r.state_digest},
  };
}

nlohmann::json to_json(const GenerationResult& result, const Model& model, int threads) {
  nlohmann::json json = {
      {"model", model.path()},
      {"model_format", model.format()},
      {"threads", threads},
      {"prompt_tokens", result.prompt_tokens},
      {"generated_tokens", result.generated_tokens},
      {"text", result.text},
      {"stop_reason", std::string(to_string(result.stop_reason))},
      {"prefill_seconds", result.prefill_seconds},
      {"decode_seconds", result.decode_seconds},
      {"prefill_tokens_per_second", result.prefill_tokens_per_second()},
      {"decode_tokens_per_second", result.decode_tokens_per_second()},
  };
  if (result.prompt_cache != PromptCacheOutcome::unused) {
    json["prompt_cache"] = std::string(to_string(result.prompt_cache));
    json["prompt_cache_tokens_reused"] = result.prompt_cache_tokens_reused;
    if (result.prompt_cache == PromptCacheOutcome::rejected) json["prompt_cache_reason"] = result.prompt_cache_reason;
  }
  return json;
}

void print_summary(const GenerationResult& result) {
  std::printf("\n");
  std::fflush(stdout);
  std::fprintf(stderr, "accord: %zu prompt tokens at %.1f tok/s, %zu generated at %.1f tok/s (%s)\n",
               result.prompt_tokens.size(), result.prefill_tokens_per_second(), result.generated_tokens.size(),
               result.decode_tokens_per_second(), std::string(to_string(result.stop_reason)).c_str());
}

// Generates on `target` and prints the text or the JSON report, to which
// `extend` adds what the target knows of itself.
int generate_and_print(const GenerateArgs& args, GenerationTarget& target, const Model& model,
                       const Tokenizer& tokenizer, const std::function<void(nlohmann::json&)>& extend) {
  GenerationOptions options;
  options.max_tokens = args.max_tokens;
  options.sampler = {args.temperature, args.top_p, args.seed};
  options.prompt_cache = args.prompt_cache;
  PieceSink stream;
  if (!args.json) {
    stream = [](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    };
  }
  auto warn = [](const std::string& warning) { std::cerr << "accord: warning: " << warning << std::endl; };
  auto result = generate(target, tokenizer, args.prompt, options, stream, warn);
  if (!result) return fail(result.error().message());
  if (!args.json) {
    print_summary(*result);
    return 0;
  }
  nlohmann::json json = to_json(*result, model, args.threads);
  json["ranks"] = args.ranks;
  extend(json);
  // Invalid UTF-8 (a byte piece cut from a multi-byte character) is
  // replaced rather than making the whole report unprintable.
  std::cout << json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  return 0;
}

int run_generate(const GenerateArgs& args) {
  auto model = Model::load(args.model);
  if (!model) return fail(model.error().message());
  auto tokenizer = find_tokenizer(args.tokenizer, *model);
  if (!tokenizer) return fail(tokenizer.error().message());

  if (args.ranks == 1) {
    cpu::ThreadPool pool(args.threads);
    Session session(*model, pool);
    SessionTarget target(session);
    return generate_and_print(args, target, *model, *tokenizer,
                              [&](nlohmann::json& json) { json["report"] = to_json(session.report()); });
  }
  DistributedOptions options;
  options.ranks = args.ranks;
  options.threads_per_rank = std::max(1, args.threads / args.ranks);
  auto session = DistributedSession::create(*model, options);
  if (!session) return fail(session.error().message());
  DistributedTarget target(**session, *model);
  return generate_and_print(args, target, *model, *tokenizer, [&](nlohmann::json& json) {
    const DistributedStats stats = (*session)->stats();
    json["phases_run"] = stats.phases_run;
    json["protocol_us_per_token"] = stats.protocol_microseconds_per_step();
  });
}

}  // namespace

Command add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt");
  cmd->add_option("--model", args->model, "GGUF model (llama) or llama2.c checkpoint (.bin)")->required();
  cmd->add_option("--tokenizer", args->tokenizer,
                  "tokenizer file, llama2.c or GGUF (default: a GGUF model's own vocabulary; for .bin "
                  "NAME.tokenizer.bin, tokenizer.bin or tok<vocab>.bin beside the model)");
  cmd->add_option("--prompt", args->prompt, "prompt text (default: empty, start from BOS alone)");
  cmd->add_option("--max-tokens", args->max_tokens, "tokens to generate, prompt excluded")->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-p", args->top_p, "nucleus sampling threshold in (0, 1]; 1 = off")->capture_default_str();
  cmd->add_option("--seed", args->seed, "random seed of the sampler")->capture_default_str();
  cmd->add_option("--threads", args->threads, "CPU threads of the rank's pool")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--prompt-cache", args->prompt_cache,
                  "prompt cache folder: reuse a cached prefix of the prompt, or save one (docs/prompt-cache.md)");
  cmd->add_option("--ranks", args->ranks,
                  "in-process ranks, each a group of actors holding a contiguous range of the model's layers")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_flag("--json", args->json,
                "print one JSON object at the end (tokens, text, speeds) instead of streaming text");
  return [args] { return run_generate(*args); };
}

}  // namespace accord::cli
