// accord generate: load a model, generate text, stream it or report JSON.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "actors/distributed_session.hpp"
#include "actors/distributed_target.hpp"
#include "apps/accord/commands.hpp"
#include "apps/accord/model_files.hpp"
#include "apps/accord/options.hpp"
#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/base/environment.hpp"
#include "runtime/fault/fault_plan.hpp"
#include "runtime/generate/generator.hpp"
#include "runtime/io/env.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/residency.hpp"
#include "runtime/serve/chat_template.hpp"
#include "runtime/serve/stop_filter.hpp"
#include "runtime/session/session.hpp"
#include "runtime/text/tokenizer.hpp"

namespace accord::cli {

namespace {

struct GenerateArgs {
  std::string model;
  std::string tokenizer;
  std::string prompt;
  int max_tokens = 256;
  float temperature = 1.0f;
  float top_p = 0.9f;
  std::string seed_text = "0";  // --seed as given; -1: draw one
  SamplerSeed seed;             // from seed_text; reported, so that a run with a drawn one can be repeated
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool json = false;
  std::string prompt_cache;
  int ranks = 1;
  int expert_ranks = 1;
  std::vector<NodeAddress> peers;  // --peers: remote nodes, one rank each
  std::string secret_file;         // --secret-file: the cluster's secret, with --peers
  std::vector<Fault> faults;       // --fault entries; ACCORD_FAULTS is read at run time
  int phase_timeout_ms = DistributedOptions{}.phase_timeout_ms;
  int retries = GenerationOptions{}.retries;
  int heal_attempts = GenerationOptions{}.heal_attempts;
  std::vector<NodeAddress> spares;  // --spares: nodes that take a lost node's rank
  std::string speculative;          // --speculative: "lookup" or "model:PATH"; empty: plain decoding
  int draft_tokens = GenerationOptions{}.draft_tokens;
  std::uint64_t max_resident_bytes = 0;  // --max-resident-bytes: each rank's weights budget
  BackendArgs compute;                   // --backend, --devices
  int context = kDefaultContext;         // --ctx-size
  KvType kv_type = KvType::f32;          // --kv-type
  bool chat = false;                     // --chat: the prompt is a user's message in the chat template
  std::string chat_template;             // --chat-template
  std::vector<std::string> reply_stops;  // with --chat: the template's end of the assistant's turn
};

constexpr std::string_view kDraftModelPrefix = "model:";

// The drafter of --speculative, and the draft model it runs, if any.
struct Speculation {
  std::unique_ptr<Model> draft_model;
  std::unique_ptr<Drafter> drafter;
};

Result<Speculation> load_speculation(const GenerateArgs& args, const Model& target) {
  Speculation speculation;
  if (args.speculative == "lookup") {
    speculation.drafter = std::make_unique<PromptLookupDrafter>();
  } else if (args.speculative.starts_with(kDraftModelPrefix)) {
    ModelLoad load;
    load.context = args.context;
    auto draft = Model::load(args.speculative.substr(kDraftModelPrefix.size()), load);
    if (!draft) return Error(draft.error().code(), "the draft model: " + draft.error().message());
    if (Status ok = check_draft_model(draft->config(), target.config()); !ok) return ok.error();
    speculation.draft_model = std::make_unique<Model>(std::move(*draft));
    // It runs here even with --peers.
    speculation.drafter = std::make_unique<ModelDrafter>(*speculation.draft_model, capped_threads(args.threads));
  }
  return speculation;
}

nlohmann::json to_json(const WeightShare& share) {
  return {
      {"bytes", share.bytes},
      {"bytes_by_type", share.bytes_by_type},
      {"resident_bytes", share.resident_bytes},
      {"residency", share.residency},
      {"budget_bytes", share.budget_bytes},
      {"streamed_bytes_per_step", share.streamed_bytes_per_step},
      {"streamed_bytes", share.streamed_bytes},
  };
}

nlohmann::json to_json(const SessionReport& r) {
  nlohmann::json shares = nlohmann::json::array();
  for (const WeightShare& share : r.weight_shares) shares.push_back(to_json(share));
  return {
      {"model_identity", r.model_identity},
      {"weights_bytes", r.weights_bytes},
      {"weights_resident_bytes", r.weights_resident_bytes},
      {"weights_residency", r.weights_residency},
      {"weights_bytes_by_type", r.weights_bytes_by_type},
      {"weight_shares", shares},
      {"expert_rows", r.expert_rows},
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
      {"kernel_path", cpu::to_string(cpu::active_isa())},
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
  json["aborted_steps"] = result.aborted_steps;
  json["retries"] = result.retries;
  json["recoveries"] = result.recoveries;
  json["heals"] = result.heals;
  json["heal_attempts"] = result.heal_attempts;
  json["heal_seconds"] = result.heal_seconds;
  json["replayed_tokens"] = result.replayed_tokens;
  json["poisoned"] = result.poisoned;
  json["poison_cause"] = result.poison_cause;
  json["decode_steps"] = result.decode_steps;
  if (result.prompt_cache != PromptCacheOutcome::unused) {
    json["prompt_cache"] = std::string(to_string(result.prompt_cache));
    json["prompt_cache_tokens_reused"] = result.prompt_cache_tokens_reused;
    if (!result.prompt_cache_reason.empty()) json["prompt_cache_reason"] = result.prompt_cache_reason;
    if (!result.prompt_cache_recovery.empty()) json["prompt_cache_recovery"] = result.prompt_cache_recovery;
  }
  return json;
}

void print_summary(const GenerationResult& result) {
  std::printf("\n");
  std::fflush(stdout);
  std::fprintf(stderr, "accord: %zu prompt tokens at %.1f tok/s, %zu generated at %.1f tok/s (%s)\n",
               result.prompt_tokens.size(), result.prefill_tokens_per_second(), result.generated_tokens.size(),
               result.decode_tokens_per_second(), std::string(to_string(result.stop_reason)).c_str());
  if (result.aborted_steps > 0) {
    std::fprintf(stderr, "accord: %d step attempt(s) aborted, %d retried\n", result.aborted_steps, result.retries);
  }
  if (result.heals > 0) {
    std::fprintf(stderr, "accord: healed %d time(s) in %.3f s, %d committed token(s) replayed\n", result.heals,
                 result.heal_seconds, result.replayed_tokens);
  }
  if (result.recoveries > 0) {
    std::fprintf(stderr, "accord: %d poisoned speculative step(s) recovered the last committed state\n",
                 result.recoveries);
  }
  if (result.drafted_tokens > 0) {
    std::fprintf(stderr, "accord: speculative: %d of %d drafted tokens accepted (%.1f%%), %d decode steps\n",
                 result.accepted_tokens, result.drafted_tokens, 100.0 * result.acceptance_rate(), result.decode_steps);
  }
}

void print_json(const nlohmann::json& json) {
  // Invalid UTF-8 (a byte piece cut from a multi-byte character) is
  // replaced rather than making the whole report unprintable.
  std::cout << json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
}

// Generates on `target` and prints the text or the JSON report, to which
// `extend` adds what the target knows of itself. A failed generation
// prints them too (the JSON with an "error" field), then the error.
int generate_and_print(const GenerateArgs& args, GenerationTarget& target, const Model& model,
                       const Tokenizer& tokenizer, Drafter* drafter,
                       const std::function<void(nlohmann::json&)>& extend) {
  GenerationOptions options;
  options.drafter = drafter;
  options.draft_tokens = args.draft_tokens;
  options.max_tokens = args.max_tokens;
  options.sampler = {args.temperature, args.top_p, args.seed.value};
  options.prompt_cache = args.prompt_cache;
  options.retries = args.retries;
  options.heal_attempts = args.heal_attempts;
  // With --chat only the reply is printed, and it ends before the
  // template's end of turn.
  serve::StopFilter reply(args.reply_stops);
  std::string reply_text;
  auto print = [&](const std::string& text) {
    reply_text += text;
    if (args.json) return;
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  PieceSink stream;
  if (!args.json || args.chat) {
    stream = [&](std::string_view piece) { print(args.chat ? reply.push(piece) : std::string(piece)); };
  }
  if (args.chat) {
    options.emit_prompt = false;
    options.stop_requested = [&reply] { return reply.stopped(); };
  }
  const auto outcome = generate(target, tokenizer, args.prompt, options, stream, warn);
  if (args.chat) print(reply.flush());
  const GenerationResult& result = outcome ? *outcome : outcome.error().partial;
  if (args.json) {
    nlohmann::json json = to_json(result, model, args.threads);
    json["seed"] = args.seed.value;
    json["ranks"] = args.peers.empty() ? args.ranks : static_cast<int>(args.peers.size());
    json["expert_ranks"] = args.expert_ranks;
    extend(json);
    if (drafter != nullptr) {
      json["speculative"] = args.speculative;
      json["draft_tokens"] = args.draft_tokens;
      json["drafted_tokens"] = result.drafted_tokens;
      json["accepted_tokens"] = result.accepted_tokens;
      json["acceptance_rate"] = result.acceptance_rate();
    }
    if (args.chat) json["reply"] = reply_text;
    if (!outcome) json["error"] = outcome.error().message();
    print_json(json);
  } else {
    print_summary(result);
    if (args.seed.drawn) {
      const auto seed = static_cast<unsigned long long>(args.seed.value);
      std::fprintf(stderr, "accord: seed %llu, drawn at random (--seed %llu repeats this run)\n", seed, seed);
    }
  }
  return outcome ? 0 : fail(outcome.error().message());
}

// --fault's entries; a bad one is a command-line error naming it.
std::vector<Fault> parse_faults(const std::vector<std::string>& entries) {
  std::vector<Fault> faults;
  for (const std::string& entry : entries) {
    auto fault = parse_fault(entry);
    if (!fault) throw CLI::ValidationError("--fault", fault.error().message());
    faults.push_back(*fault);
  }
  return faults;
}

// The faults to inject, from --fault and ACCORD_FAULTS together, checked
// against the ranks before anything is loaded; ACCORD_SECRET_FILE stands
// in for a missing --secret-file.
Result<std::vector<Fault>> fault_plan(GenerateArgs& args) {
  auto environment = read_environment();
  if (!environment) return environment.error();
  args.secret_file = environment->secret_file_for(args.secret_file);
  std::vector<Fault> plan = args.faults;
  plan.insert(plan.end(), environment->faults.begin(), environment->faults.end());
  const int ranks = args.peers.empty() ? args.ranks : static_cast<int>(args.peers.size());
  if (Status ok = check_fault_plan(plan, ranks, args.expert_ranks); !ok) return ok.error();
  return plan;
}

// With --chat: the prompt becomes a user's message in the chat template,
// and the reply stops at the template's end of turn.
Status render_chat(GenerateArgs& args) {
  if (!args.chat) return {};
  auto chat = serve::chat_template_for(args.chat_template, args.model);
  if (!chat) return chat.error();
  args.prompt = chat->render({{"user", args.prompt}});
  args.reply_stops = chat->stop_sequences();
  return {};
}

// The options of a session on several ranks, in process or on nodes.
DistributedOptions distributed_options(const GenerateArgs& args, const std::vector<Fault>& faults,
                                       const BackendChoice& backend) {
  DistributedOptions options;
  options.ranks = args.ranks;
  options.expert_ranks = args.expert_ranks;
  options.threads = args.threads;
  options.phase_timeout_ms = args.phase_timeout_ms;
  options.faults = faults;
  options.secret_file = args.secret_file;
  options.spares = args.spares;
  options.max_resident_bytes = args.max_resident_bytes;
  options.kv_type = args.kv_type;
  options.backend = backend;
  return options;
}

int run_generate(GenerateArgs args) {
  args.seed = sampler_seed(args.seed_text);
  // With --peers the ranks compute on the nodes, and each node caps the
  // count it is sent by its own cores.
  if (args.peers.empty()) args.threads = capped_threads(args.threads);
  auto faults = fault_plan(args);
  if (!faults) return fail(faults.error().message());
  if (!args.peers.empty() && args.compute.choice() != BackendChoice{}) {
    return fail("with --peers, each node computes where its own --backend and --devices say");
  }
  auto backend = checked_backend(args.compute);
  if (!backend) return fail(backend.error().message());
  // Each node keeps its prompt caches in its own folder, and takes a name.
  if (!args.peers.empty() && !args.prompt_cache.empty()) {
    auto named = entry_in({}, args.prompt_cache, "with --peers, --prompt-cache (a cache in each node's folder)");
    if (!named) return fail(named.error().message());
  }
  // The header says what the tokenizer must fit, so a tokenizer that does
  // not is refused before a long load.
  auto header = Model::read_header(args.model);
  if (!header) return fail(header.error().message());
  if (Status fits = check_kv_type(header->config, args.kv_type); !fits) return fail(fits.error().message());
  auto tokenizer = find_tokenizer(args.tokenizer, args.model, *header);
  if (!tokenizer) return fail(tokenizer.error().message());
  if (Status chat = render_chat(args); !chat) return fail(chat.error().message());
  // A coordinator of nodes reads no weights: each node reads its shard.
  ModelLoad load{args.peers.empty() ? WeightScope::everything() : WeightScope::nothing(), args.threads};
  load.context = args.context;
  auto model = Model::load(args.model, load);
  if (!model) return fail(model.error().message());
  auto speculation = load_speculation(args, *model);
  if (!speculation) return fail(speculation.error().message());
  Drafter* drafter = speculation->drafter.get();

  // Faults are injected into rank actors, which a single-rank Session has not.
  if (args.ranks == 1 && args.expert_ranks == 1 && args.peers.empty() && faults->empty()) {
    if (args.max_resident_bytes != 0) {
      auto plan = plan_residency(*model, WeightScope::everything(), args.max_resident_bytes);
      if (!plan) return fail(plan.error().message());
    }
    cpu::ThreadPool pool(args.threads);
    Session session(*model, pool, StageOptions{*backend, args.max_resident_bytes, args.kv_type, nullptr});
    SessionTarget target(session);
    return generate_and_print(args, target, *model, *tokenizer, drafter,
                              [&](nlohmann::json& json) { json["report"] = to_json(session.report()); });
  }
  const DistributedOptions options = distributed_options(args, *faults, *backend);
  auto session = args.peers.empty() ? DistributedSession::create(*model, options)
                                    : DistributedSession::connect(args.peers, *model, options);
  if (!session) return fail(session.error().message());
  DistributedTarget target(**session, *model);
  return generate_and_print(args, target, *model, *tokenizer, drafter, [&](nlohmann::json& json) {
    const DistributedStats stats = (*session)->stats();
    json["phases_run"] = stats.phases_run;
    // Remote ranks compute in their own processes; the client cannot tell
    // their compute time from the protocol's.
    if (args.peers.empty()) json["protocol_us_per_token"] = stats.protocol_microseconds_per_step();
    // A poisoned session's ranks may not answer (a node that went away
    // swallows the question until its timeout), so it has no report.
    if (json.value("poisoned", false)) return;
    if (auto report = (*session)->report()) json["report"] = to_json(*report);
  });
}

// Speculative decoding verifies drafts greedily, so it needs --temperature 0;
// checked once `cmd` is parsed, before anything is loaded.
void check_speculation(const GenerateArgs& args, const CLI::App& cmd) {
  if (args.speculative.empty() || args.temperature == 0.0f) return;
  const CLI::Option* temperature = cmd.get_option("--temperature");
  const std::string given =
      temperature->count() > 0 ? temperature->as<std::string>() : "the default " + temperature->get_default_str();
  throw CLI::ValidationError("--speculative", "drafts are verified greedily: it needs --temperature 0, got " + given);
}

// --max-tokens, --temperature, --top-p, --seed: how much is generated and
// how each token is drawn.
void add_sampling_options(CLI::App& cmd, GenerateArgs& args) {
  cmd.add_option("--max-tokens", args.max_tokens, "tokens to generate, prompt excluded")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->capture_default_str();
  cmd.add_option("--temperature", args.temperature,
                 "0 = greedy; so is a temperature so small that a logit divided by it overflows a float "
                 "(below about 1e-37 with the logits of usual models)")
      ->check(finite_at_least_zero())
      ->capture_default_str();
  cmd.add_option("--top-p", args.top_p, "nucleus sampling threshold in (0, 1]; 1 = off")
      ->check(above_zero_up_to_one())
      ->capture_default_str();
  cmd.add_option("--seed", args.seed_text,
                 "random seed of the sampler, 0 to 2^64-1; -1 draws one at random (reported, to repeat the run)")
      ->check(sampler_seed_range())
      ->capture_default_str();
}

// --ranks or --peers and what running on several ranks takes: the cluster's
// secret, injected faults, and the timeouts, retries, healing and spare
// nodes that recover from a lost rank. `args` is shared: --fault's parser
// keeps it.
void add_cluster_options(CLI::App& cmd, const std::shared_ptr<GenerateArgs>& args) {
  cmd.add_option("--ranks", args->ranks,
                 "in-process ranks, each a group of actors holding a contiguous range of the model's layers")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd.add_option_function<std::string>(
         "--peers", node_list(args->peers, "--peers"),
         "remote ranks instead of in-process ones: distinct `accord node` processes, rank 0 first; this process "
         "runs the coordinator")
      ->type_name("HOST:PORT,...")
      ->excludes("--ranks");
  cmd.add_option("--expert-ranks", args->expert_ranks,
                 "spread each mixture-of-experts block's experts over this many of the ranks (--ranks or --peers) "
                 "(docs/models.md, \"Experts over ranks\"); 1: each rank holds its own layers' experts")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd.add_option("--secret-file", args->secret_file,
                 "with --peers: file of the cluster's shared secret (or ACCORD_SECRET_FILE), which the nodes "
                 "must prove and this coordinator proves to them")
      ->needs("--peers");
  cmd.add_option_function<std::vector<std::string>>(
         "--fault", [args](const std::vector<std::string>& entries) { args->faults = parse_faults(entries); },
         "inject a fault (repeatable): rank RANK fails in PHASE the AT-th time it runs it (default 1); KIND is "
         "error, throw, delay, exit, drop or corrupt (runtime/fault/fault_plan.hpp). Runs the ranks as actors "
         "even with --ranks 1")
      ->type_name("RANK:PHASE:KIND[:AT]");
  cmd.add_option("--phase-timeout-ms", args->phase_timeout_ms,
                 "a rank that does not report a phase within it aborts the step")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->capture_default_str();
  cmd.add_option("--retries", args->retries, "times an aborted step is run again before generation fails")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()))
      ->capture_default_str();
  cmd.add_option("--heal-attempts", args->heal_attempts,
                 "times a poisoned session (a rank lost) is healed over a generation: lost ranks started afresh, "
                 "the committed tokens replayed, the step run again (docs/healing.md); 0: a poison ends generation")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  cmd.add_option_function<std::string>(
         "--spares", node_list(args->spares, "--spares"),
         "with --peers: `accord node` processes that take the rank of a node that cannot be reached, in order")
      ->type_name("HOST:PORT,...")
      ->needs("--peers");
}

// --speculative and its --draft-tokens.
void add_speculation_options(CLI::App& cmd, GenerateArgs& args) {
  CLI::Option* speculative =
      cmd.add_option("--speculative", args.speculative,
                     "speculative decoding with greedy verification (needs --temperature 0): `lookup` drafts from "
                     "earlier text (prompt lookup), `model:PATH` from a smaller model with the same vocabulary")
          ->check([](const std::string& text) {
            const bool draft_model = text.starts_with(kDraftModelPrefix) && text.size() > kDraftModelPrefix.size();
            const bool known = text == "lookup" || draft_model;
            return known ? std::string() : "expected `lookup` or `model:PATH`, got `" + text + "`";
          });
  cmd.add_option("--draft-tokens", args.draft_tokens, "the most draft tokens one speculative step verifies")
      ->check(CLI::Range(1, 64))
      ->needs(speculative)
      ->capture_default_str();
}

}  // namespace

Command add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt");
  cmd->add_option("--model", args->model, "GGUF model (llama) or llama2.c checkpoint (.bin)")->required();
  cmd->add_option("--tokenizer", args->tokenizer,
                  "tokenizer file, llama2.c or GGUF (default: a GGUF model's own vocabulary; for .bin "
                  "NAME.tokenizer.bin, tokenizer.bin or tok<vocab>.bin beside the model)");
  cmd->add_option("--prompt", args->prompt,
                  "prompt text (default: empty, start from BOS alone); BOS added as the vocabulary says, "
                  "special tokens such as <|im_start|> parsed");
  // Every option is checked here, as it is parsed, so that a bad one is a
  // command-line error (exit 2) before the model is opened, not a failed
  // generation after a long load.
  add_sampling_options(*cmd, *args);
  add_context_option(*cmd, args->context);
  add_kv_type_option(*cmd, args->kv_type);
  cmd->add_flag("--chat", args->chat,
                "the prompt is a user's message: it goes into the model's chat template (docs/serve.md), only the "
                "reply is printed, and the reply ends at the template's end of turn");
  cmd->add_option("--chat-template", args->chat_template,
                  "with --chat: a built-in (chatml, llama3, gemma, phi3, mistral-v7, ...) or a Jinja file recognised "
                  "as one (default: the GGUF's tokenizer.chat_template, else plain)")
      ->needs("--chat");
  cmd->add_option("--threads", args->threads,
                  "CPU threads of the compute pool, which in-process ranks share; each node of --peers makes "
                  "a pool of this many. At most " +
                      std::to_string(cpu::kThreadsPerCore) +
                      " per core of the machine that runs it (more are capped, with a warning)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--prompt-cache", args->prompt_cache,
                  "prompt cache folder: reuse a cached prefix of the prompt, or save one (docs/prompt-cache.md). "
                  "With --peers a name: each node keeps the cache in its --prompt-cache-dir");
  add_cluster_options(*cmd, args);
  cmd->add_option("--max-resident-bytes", args->max_resident_bytes,
                  "each rank keeps at most this many bytes of its weights in memory and streams its other layers "
                  "every step, the outputs unchanged (docs/residency.md; default 0: all resident)")
      ->check(whole_number_range());
  add_backend_options(*cmd, args->compute);
  add_speculation_options(*cmd, *args);
  cmd->add_flag("--json", args->json,
                "print one JSON object at the end (tokens, text, speeds) instead of streaming text");
  cmd->callback([args, cmd] { check_speculation(*args, *cmd); });
  return [args] { return run_generate(*args); };
}

}  // namespace accord::cli
