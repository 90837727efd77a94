// accord serve: an OpenAI-compatible HTTP service over K sessions.
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <boost/asio/ip/address.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>

#include "actors/distributed_session.hpp"
#include "actors/distributed_target.hpp"
#include "actors/node_address.hpp"
#include "apps/accord/commands.hpp"
#include "apps/accord/model_files.hpp"
#include "apps/accord/options.hpp"
#include "apps/accord/serve_http.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/base/environment.hpp"
#include "runtime/fault/fault_plan.hpp"
#include "runtime/io/mapped_file.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/kv_pool.hpp"
#include "runtime/model/model.hpp"
#include "runtime/rank/partition.hpp"
#include "runtime/serve/chat_template.hpp"
#include "runtime/serve/prefix_store.hpp"
#include "runtime/serve/progress.hpp"
#include "runtime/serve/scheduler.hpp"
#include "runtime/serve/service.hpp"
#include "runtime/serve/watched_slot.hpp"

namespace accord::cli {

namespace {

struct ServeArgs {
  std::string model;
  std::string tokenizer;
  std::string listen = "127.0.0.1:8080";
  int parallel = 1;
  int queue_limit = 64;
  int ranks = 1;
  int expert_ranks = 1;  // --expert-ranks
  std::vector<NodeAddress> peers;
  std::string secret_file;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string prompt_cache;
  bool no_prefix_reuse = false;
  serve::PrefixStoreLimits prefix_store;  // --prefix-store-entries, --prefix-store-bytes
  std::string chat_template;
  std::string log_level = "info";
  std::size_t max_body_bytes = 1 << 20;
  int request_timeout_ms = 30000;
  int retries = GenerationOptions{}.retries;
  int heal_attempts = GenerationOptions{}.heal_attempts;
  int phase_timeout_ms = DistributedOptions{}.phase_timeout_ms;
  int batch_window_us = static_cast<int>(StepBatcher::kDefaultGatherWindow.count());
  std::string api_key;
  std::string api_key_file;
  bool metrics_public = false;
  int shutdown_grace_ms = 10000;
  int context = kDefaultContext;      // --ctx-size
  KvType kv_type = KvType::f32;       // --kv-type
  std::uint64_t kv_budget_bytes = 0;  // --kv-budget-bytes: the single-rank slots' KV pool
};

// Where each rank of a slot's session runs and which layers it holds, in
// rank order: split as the session splits them
// (DistributedSession::Impl::partition_for), in process or over nodes.
std::vector<serve::RankFigures> rank_places(const ServeArgs& args, const Model& model) {
  const int ranks = args.peers.empty() ? args.ranks : static_cast<int>(args.peers.size());
  std::vector<serve::RankFigures> places(static_cast<std::size_t>(ranks));
  auto partition = Partition::by_weight(model, ranks);
  for (int r = 0; r < ranks; ++r) {
    auto& place = places[static_cast<std::size_t>(r)];
    if (!args.peers.empty()) place.node = args.peers[static_cast<std::size_t>(r)].to_string();
    if (partition) {
      place.first_layer = partition->range(r).first;
      place.layers = partition->range(r).count;
    }
  }
  return places;
}

// A slot on a distributed session: in-process ranks, or remote nodes.
class DistributedSlot final : public serve::SlotSession {
 public:
  DistributedSlot(std::unique_ptr<DistributedSession> session, const Model& model,
                  std::vector<serve::RankFigures> places)
      : session_(std::move(session)), target_(*session_, model), places_(std::move(places)) {}
  GenerationTarget& target() override { return target_; }
  Status reset() override { return session_->reset(); }
  // What each rank reports of its state (rank_states), where it runs.
  Result<std::vector<serve::RankFigures>> rank_figures() override {
    auto states = session_->rank_states();
    if (!states) return states.error();
    std::vector<serve::RankFigures> figures = places_;
    for (std::size_t r = 0; r < figures.size() && r < states->size(); ++r) {
      const RankStateReport& state = (*states)[r];
      figures[r].weights_bytes = state.weights.bytes;
      figures[r].kv_bytes = state.kv_held_bytes;
      figures[r].expert_rows = state.expert_rows;
    }
    return figures;
  }

 private:
  std::unique_ptr<DistributedSession> session_;
  DistributedTarget target_;
  const std::vector<serve::RankFigures> places_;
};

// A single-rank slot computes on the shared `pool`, in `batcher`'s batches,
// injects `faults` itself and times its phases into `metrics`; a
// distributed session makes pools of its own, so each gets a share of the
// threads. Each injects `faults`.
Result<std::unique_ptr<serve::SlotSession>> make_slot(const ServeArgs& args, const Model& model,
                                                      const std::vector<Fault>& faults, cpu::ThreadPool& pool,
                                                      StepBatcher& batcher, serve::Metrics& metrics,
                                                      const std::shared_ptr<KvPool>& kv_pool) {
  if (args.ranks == 1 && args.expert_ranks == 1 && args.peers.empty()) {
    auto timer = [&metrics](const PhaseId& phase, double seconds) {
      metrics.observe_phase(to_string(phase.phase), seconds);
    };
    auto slot = std::make_unique<serve::SessionSlot>(model, pool, &batcher, timer,
                                                     StageOptions{BackendChoice{}, 0, args.kv_type, kv_pool});
    if (Status ok = slot->inject_faults(faults); !ok) return ok.error();
    return std::unique_ptr<serve::SlotSession>(std::move(slot));
  }
  DistributedOptions options;
  options.ranks = args.ranks;
  options.expert_ranks = args.expert_ranks;
  options.threads = std::max(1, args.threads / args.parallel);
  options.phase_timeout_ms = args.phase_timeout_ms;
  options.secret_file = args.secret_file;
  options.faults = faults;
  options.kv_type = args.kv_type;
  auto session = args.peers.empty() ? DistributedSession::create(model, options)
                                    : DistributedSession::connect(args.peers, model, options);
  if (!session) return session.error();
  return std::unique_ptr<serve::SlotSession>(
      std::make_unique<DistributedSlot>(std::move(*session), model, rank_places(args, model)));
}

// The chat template: --chat-template, else the GGUF's own, else `plain`.
Result<serve::ChatTemplate> chat_template(const ServeArgs& args) {
  bool plain = false;
  auto chat = serve::chat_template_for(args.chat_template, args.model, &plain);
  if (plain) spdlog::info("the model has no chat template: chat uses `plain` (--chat-template chooses another)");
  return chat;
}

// --api-key, or the first line of --api-key-file; empty: none. The file is
// opened as models are: anything but a regular file is refused, never
// waited on.
Result<std::string> api_key(const ServeArgs& args) {
  if (args.api_key_file.empty()) return args.api_key;
  auto file = MappedFile::open(args.api_key_file);
  if (!file) return Error(file.error().code(), "--api-key-file: " + file.error().message());
  std::string key;
  if (file->size() > 0) key.assign(reinterpret_cast<const char*>(file->bytes().data()), file->size());
  key = key.substr(0, key.find('\n'));
  while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
  if (key.empty()) return Error(ErrorCode::contract, "--api-key-file: " + args.api_key_file + " holds no key");
  return key;
}

bool is_loopback(const std::string& host) {
  boost::system::error_code error;
  const auto address = boost::asio::ip::make_address(host, error);
  return !error && address.is_loopback();
}

Result<HttpOptions> http_options(const ServeArgs& args) {
  auto address = parse_node_address(args.listen, /*allow_any_port=*/true);
  if (!address) return Error(address.error().code(), "--listen: " + address.error().message());
  HttpOptions options;
  options.host = address->host;
  options.port = address->port;
  options.body_limit = args.max_body_bytes;
  options.request_timeout = std::chrono::milliseconds(args.request_timeout_ms);
  options.shutdown_grace = std::chrono::milliseconds(args.shutdown_grace_ms);
  return options;
}

// The model, its weights loaded where this process computes (with --peers
// the nodes load theirs), its progress drawn on `progress`.
Result<Model> load_model(const ServeArgs& args, serve::TerminalProgress& progress) {
  spdlog::info("loading {}", args.model);
  ModelLoad load{args.peers.empty() ? WeightScope::everything() : WeightScope::nothing(), args.threads};
  load.context = args.context;
  const std::string model_name = std::filesystem::path(args.model).filename().string();
  load.progress = [&](std::uint64_t done, std::uint64_t total) {
    progress.show(serve::load_progress_line(model_name, done, total), done == total);
  };
  auto model = Model::load(args.model, load);
  progress.clear();
  return model;
}

// What the Service answers with: the model (its id is the file name's stem)
// and the options the command was given.
serve::ServiceOptions service_options(const ServeArgs& args, const Model& model, const serve::ChatTemplate& chat,
                                      const std::string& api_key) {
  serve::ServiceOptions options;
  options.model_id = std::filesystem::path(args.model).stem().string();
  options.context = model.config().seq_len;
  options.chat_template = chat;
  options.prompt_cache = args.prompt_cache;
  options.retries = args.retries;
  options.heal_attempts = args.heal_attempts;
  options.api_key = api_key;
  options.metrics_public = args.metrics_public;
  return options;
}

// The process's exit status once the server stopped: 0 when it drained.
int exit_status(ServeEnd end, const serve::Scheduler& scheduler) {
  const int status = end == ServeEnd::drained ? 0 : 1;
  if (!scheduler.idle()) {
    // A slot is inside a step whose client was answered (cut at the grace
    // period, or gone): end now rather than wait for it. A prompt cache it
    // may be writing is published atomically or not at all.
    spdlog::info("ending with a step still running");
    spdlog::default_logger()->flush();
    std::fflush(stdout);
    std::_Exit(status);
  }
  spdlog::info("stopped: every request was answered");
  return status;
}

// The store of single-rank slots' prompts; none for distributed slots, nor
// without prefix reuse.
std::shared_ptr<serve::PrefixStore> prefix_store(const ServeArgs& args, const Model& model) {
  if (args.no_prefix_reuse || args.ranks != 1 || !args.peers.empty() || args.prefix_store.entries == 0) return nullptr;
  const std::uint64_t block = KvCache::kBlockPositions * kv_position_bytes(model.config(), args.kv_type);
  return std::make_shared<serve::PrefixStore>(args.prefix_store, block);
}

// /metrics reads the batcher's counts, the KV pool's use and the prefix
// store's counts when written.
void watch_sources(serve::Metrics& metrics, const ServeArgs& args, const StepBatcher& batcher, const KvPool& kv_pool,
                   const std::shared_ptr<serve::PrefixStore>& store) {
  if (store) metrics.set_prefix_store_source([store] { return store->counts(); });
  metrics.set_load(0, 0, args.parallel);
  metrics.set_batch_source([&batcher] {
    const StepBatcher::Stats stats = batcher.stats();
    return serve::BatchCounts{stats.batches, stats.steps, stats.widest};
  });
  metrics.set_kv_pool_source([&kv_pool] {
    return serve::Metrics::KvPoolCounts{kv_pool.used_bytes(), kv_pool.budget_bytes()};
  });
}

int run_serve(ServeArgs args) {
  spdlog::set_level(spdlog::level::from_str(args.log_level));
  if (args.peers.empty()) args.threads = capped_threads(args.threads);
  auto http = http_options(args);
  if (!http) return fail(http.error().message());
  auto key = api_key(args);
  if (!key) return fail(key.error().message());
  if (key->empty() && !is_loopback(http->host)) {
    spdlog::warn("listening on {} without an API key: anyone who reaches it may use it (--api-key-file)", http->host);
  }
  // Each slot injects ACCORD_FAULTS' plan into its own session.
  auto environment = read_environment();
  if (!environment) return fail(environment.error().message());
  const std::vector<Fault>& faults = environment->faults;
  args.secret_file = environment->secret_file_for(args.secret_file);
  const int ranks = args.peers.empty() ? args.ranks : static_cast<int>(args.peers.size());
  if (Status ok = check_fault_plan(faults, ranks, args.expert_ranks); !ok) return fail(ok.error().message());
  auto header = Model::read_header(args.model);
  if (!header) return fail(header.error().message());
  if (Status fits = check_kv_type(header->config, args.kv_type); !fits) return fail(fits.error().message());
  auto tokenizer = find_tokenizer(args.tokenizer, args.model, *header);
  if (!tokenizer) return fail(tokenizer.error().message());
  auto chat = chat_template(args);
  if (!chat) return fail(chat.error().message());
  serve::TerminalProgress progress;  // on a terminal only
  auto model = load_model(args, progress);
  if (!model) return fail(model.error().message());

  // Declared first, so that it outlives the slots, whose answers it posts.
  HttpServer server(*http);
  auto bound = server.listen();
  if (!bound) return fail(bound.error().message());
  cpu::ThreadPool pool(args.threads);
  StepBatcher batcher(*model, pool, std::chrono::microseconds(args.batch_window_us));
  batcher.set_progress([&progress](const StepBatcher::Progress& at) {
    if (at.units_done == at.units) return progress.clear();
    progress.show(serve::prefill_progress_line(at.rows, at.units_done, at.units));
  });
  serve::Metrics metrics;
  auto kv_pool = std::make_shared<KvPool>(args.kv_budget_bytes);
  std::vector<std::unique_ptr<serve::SlotSession>> slots;
  // With --peers each slot is a session of its own on every node, so a
  // node needs --slots K; one with fewer refuses the slot past them.
  for (int i = 0; i < args.parallel; ++i) {
    auto slot = make_slot(args, *model, faults, pool, batcher, metrics, kv_pool);
    if (!slot)
      return fail("slot " + std::to_string(i + 1) + " of " + std::to_string(args.parallel) + ": " +
                  slot.error().message());
    // What the slot's session does shows on /metrics and the status page.
    slots.push_back(std::make_unique<serve::WatchedSlot>(std::move(*slot), metrics.watch_slot()));
  }
  auto store = prefix_store(args, *model);
  watch_sources(metrics, args, batcher, *kv_pool, store);
  serve::Scheduler scheduler(
      *tokenizer, std::move(slots), args.queue_limit,
      [&](int queued, int active) { metrics.set_load(queued, active, args.parallel); },
      [](const std::string& warning) { spdlog::warn("{}", warning); },
      args.no_prefix_reuse ? serve::SlotReuse::none : serve::SlotReuse::prefix,
      serve::KvRoom{kv_pool, kv_position_bytes(model->config(), args.kv_type)}, store);
  const serve::ServiceOptions options = service_options(args, *model, *chat, *key);
  serve::Service service(*tokenizer, scheduler, metrics, options);
  spdlog::info("model '{}', chat template {}, {} slot(s)", options.model_id, chat->name(), args.parallel);
  spdlog::info("chat with the model in a browser: open http://{}/ (the cluster's status: /status)", *bound);
  // One line on stdout that scripts wait for.
  std::printf("accord: serving on http://%s\n", bound->c_str());
  std::fflush(stdout);
  return exit_status(server.run(service), scheduler);
}

// The HTTP server's limits, who may use it, and how long a shutdown waits.
void add_http_options(CLI::App& cmd, ServeArgs& args) {
  cmd.add_option("--max-body-bytes", args.max_body_bytes, "larger request bodies are answered 413")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30))
      ->capture_default_str();
  cmd.add_option("--request-timeout-ms", args.request_timeout_ms,
                 "a request must arrive whole within it (else 408), and each write of an answer complete")
      ->check(CLI::Range(1, 3600 * 1000))
      ->capture_default_str();
  auto* key = cmd.add_option("--api-key", args.api_key,
                             "clients must send 'Authorization: Bearer KEY' (all but /health, /ready; "
                             "/metrics too unless --metrics-public); visible to other users in the process list, "
                             "--api-key-file is not")
                  ->check([](const std::string& value) { return value.empty() ? "the key must not be empty" : ""; });
  cmd.add_option("--api-key-file", args.api_key_file, "the API key: the file's first line")
      ->check(CLI::ExistingFile)
      ->excludes(key);
  cmd.add_flag("--metrics-public", args.metrics_public, "/metrics answers without the API key");
  cmd.add_option("--shutdown-grace-ms", args.shutdown_grace_ms,
                 "after SIGTERM or SIGINT, running requests may finish within it; then they are cut")
      ->check(CLI::Range(0, 3600 * 1000))
      ->capture_default_str();
}

// How a slot's session recovers from an aborted step or a lost rank.
void add_recovery_options(CLI::App& cmd, ServeArgs& args) {
  cmd.add_option("--retries", args.retries, "times an aborted step is run again")->capture_default_str();
  cmd.add_option("--heal-attempts", args.heal_attempts, "times a poisoned session is healed within a request")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  cmd.add_option("--phase-timeout-ms", args.phase_timeout_ms, "a rank that does not report within it aborts the step")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
}

}  // namespace

Command add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve an OpenAI-compatible HTTP API (docs/serve.md)");
  cmd->add_option("--model", args->model, "GGUF model (llama) or llama2.c checkpoint (.bin)")->required();
  cmd->add_option("--tokenizer", args->tokenizer, "tokenizer file, as for `accord generate`");
  add_context_option(*cmd, args->context);
  add_kv_type_option(*cmd, args->kv_type);
  add_kv_budget_option(*cmd, args->kv_budget_bytes, "the single-rank slots");
  cmd->add_option("--listen", args->listen, "HOST:PORT to listen on; port 0 picks a free one")->capture_default_str();
  cmd->add_option("--parallel", args->parallel, "requests generated at once, each on a session of its own")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--queue-limit", args->queue_limit, "requests that may wait for a free slot; more are answered 429")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--ranks", args->ranks, "in-process ranks of each slot's session")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option_function<std::string>(
         "--peers", node_list(args->peers, "--peers"),
         "remote ranks: `accord node` processes, rank 0 first; each slot is a session on every node, "
         "so the nodes need --slots K")
      ->type_name("HOST:PORT,...")
      ->excludes("--ranks");
  cmd->add_option("--expert-ranks", args->expert_ranks,
                  "spread each mixture-of-experts block's experts over this many of each slot's ranks "
                  "(docs/models.md, \"Experts over ranks\")")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--secret-file", args->secret_file, "with --peers: the cluster's shared secret")->needs("--peers");
  cmd->add_option("--threads", args->threads,
                  "CPU threads of the pool the slots share, one kernel at a time (with --ranks, each slot's "
                  "session gets threads / parallel of its own; with --peers, on each node)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--batch-window-us", args->batch_window_us,
                  "single-rank slots decode together in one batched step, which waits at most this long for the "
                  "steps of the other slots that are generating (0: it takes the steps already asked for)")
      ->check(CLI::Range(0, 1000 * 1000))
      ->capture_default_str();
  cmd->add_option("--prompt-cache", args->prompt_cache, "prompt cache folder: requests reuse cached prefixes");
  cmd->add_flag("--no-prefix-reuse", args->no_prefix_reuse,
                "each request starts on an empty session, and no prompt is kept (default: a slot keeps its last "
                "request's tokens, single-rank slots keep prompts in a shared store, and a request prefills only "
                "what they do not begin)");
  cmd->add_option("--prefix-store-entries", args->prefix_store.entries,
                  "prompts (of a block, 32 tokens, or more) the single-rank slots keep as snapshots for any later "
                  "request that begins with them; least recently used go first (0: none)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--prefix-store-bytes", args->prefix_store.bytes,
                  "the most KV bytes the kept prompts span, each counted whole (0: no bound but the entries and "
                  "--kv-budget-bytes, under which kept prompts are let go before idle slots are emptied)")
      ->capture_default_str();
  cmd->add_option("--chat-template", args->chat_template,
                  "a built-in (chatml, llama3, gemma, phi3, mistral-v7, ...: docs/serve.md) or plain, or a Jinja "
                  "file recognised as one (default: the GGUF's tokenizer.chat_template, else plain)");
  cmd->add_option("--log-level", args->log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();
  add_http_options(*cmd, *args);
  add_recovery_options(*cmd, *args);
  return [args] { return run_serve(*args); };
}

}  // namespace accord::cli
