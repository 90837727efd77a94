#include "runtime/serve/service.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <array>
#include <cctype>
#include <optional>
#include <random>
#include <utility>

#include "runtime/serve/stop_filter.hpp"
#include "runtime/serve/web_assets.hpp"

namespace accord::serve {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::string_view kCompletionsPath = "/v1/completions";
constexpr std::string_view kChatPath = "/v1/chat/completions";
constexpr std::string_view kStatusEventsPath = "/status/events";
// The status nginx logs for a client that closed its connection before the
// answer: nobody receives it, but the metrics say what happened.
constexpr int kClientClosed = 499;

std::int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

HttpResponse json_response(int status, std::string body) { return {status, "application/json", std::move(body), {}}; }

ApiError server_error(int status, std::string message) {
  return ApiError{status, std::move(message), "server_error", "", ""};
}

// SHA-256 of `text`: keys are compared by their digests, which have one
// length whatever the key's.
KeyDigest digest_of(std::string_view text) {
  KeyDigest digest{};
  unsigned int length = 0;
  EVP_Digest(text.data(), text.size(), digest.data(), &length, EVP_sha256(), nullptr);
  return digest;
}

// The field a refused prompt's error names.
std::string prompt_param(Endpoint endpoint) { return endpoint == Endpoint::chat_completions ? "messages" : "prompt"; }

// The token of "Bearer <token>" (the scheme in any case), or nothing.
std::optional<std::string_view> bearer_token(std::string_view authorization) {
  constexpr std::string_view scheme = "bearer ";
  if (authorization.size() < scheme.size()) return std::nullopt;
  for (std::size_t i = 0; i < scheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != scheme[i]) return std::nullopt;
  }
  return authorization.substr(scheme.size());
}

// A file of the chat page, or 304 when the client holds it already. The
// client asks again each time (no-cache) and the ETag spares the bytes; the
// page may load nothing but from its own origin.
HttpResponse web_response(const WebAsset& asset, std::string_view if_none_match) {
  std::string headers = "ETag: " + std::string(asset.etag) +
                        "\r\nCache-Control: no-cache\r\nX-Content-Type-Options: nosniff\r\n"
                        "Content-Security-Policy: default-src 'self'; img-src 'self' data:; frame-ancestors 'none'\r\n";
  const bool held = if_none_match == "*" || if_none_match.find(asset.etag) != std::string_view::npos;
  if (held) return {304, std::string(asset.content_type), "", std::move(headers)};
  return {200, std::string(asset.content_type), std::string(asset.body), std::move(headers)};
}

// The finish reason OpenAI gives for how generation ended.
std::string finish_reason(StopReason reason) {
  return reason == StopReason::max_tokens || reason == StopReason::context_full ? "length" : "stop";
}

// One completion in flight: what its callbacks share, on the slot's thread.
struct Exchange {
  Exchange(std::string endpoint, ReplyHeader reply, std::shared_ptr<Responder> client, const CompletionRequest& wanted,
           std::vector<std::string> stops, int context_tokens)
      : path(std::move(endpoint)),
        context(context_tokens),
        prompt_field(prompt_param(wanted.endpoint)),
        header(std::move(reply)),
        responder(std::move(client)),
        stream(wanted.stream),
        include_usage(wanted.include_usage),
        echoed(wanted.echo ? wanted.prompt : std::string()),
        stop_sequences(stops),
        filter(std::move(stops)),
        logprobs(wanted.top_logprobs >= 0),
        prompt_bytes(wanted.prompt.size()),
        completion_offset(prompt_bytes) {}

  std::string path;
  int context;               // the model's, in tokens
  std::string prompt_field;  // what a refused prompt's error names
  ReplyHeader header;
  std::shared_ptr<Responder> responder;
  bool stream;
  bool include_usage;
  std::string echoed;  // the prompt, when echo was asked
  std::vector<std::string> stop_sequences;
  // The completion being generated: its filter, and what was not streamed.
  StopFilter filter;
  std::string text;
  std::vector<CompletionChoice> finished;  // the completions before it
  bool opened = false;
  Clock::time_point start = Clock::now();
  Clock::time_point last_step;
  // Log-probabilities, when asked for: the prompt's (with echo) and the
  // generated tokens' not yet sent with their text; offsets count from the
  // prompt's start, a completion's from the prompt's end, as OpenAI's do.
  bool logprobs;
  Logprobs echo_logprobs;
  Logprobs pending;
  std::size_t prompt_offset = 0;
  std::size_t prompt_bytes;
  std::size_t completion_offset;

  // Streams open when the first piece is ready, on the slot's thread, so
  // that a request refused with 429 never had a 200 sent.
  void open() {
    if (opened) return;
    opened = true;
    responder->open_stream();
    if (header.endpoint == Endpoint::chat_completions) responder->send_event(stream_role_event(header));
    if (!echoed.empty()) responder->send_event(stream_text_event(header, echoed, logprobs ? &echo_logprobs : nullptr));
  }

  void take(std::string_view piece) {
    std::string ready = filter.push(piece);
    if (ready.empty()) return;
    if (stream) {
      open();
      send_text(ready);
    } else {
      text += ready;
    }
  }

  // A stream's text, with the log-probabilities of the tokens that came
  // since the last.
  void send_text(std::string_view ready) {
    const Logprobs sent = std::exchange(pending, {});
    responder->send_event(stream_text_event(header, ready, logprobs ? &sent : nullptr));
  }

  void take_logprobs(const TokenLogprobs& token, bool prompt) {
    Logprobs& into = prompt ? echo_logprobs : pending;
    std::size_t& offset = prompt ? prompt_offset : completion_offset;
    into.tokens.push_back(token);
    into.text_offsets.push_back(offset);
    offset += token.chosen.text.size();
  }

  // A whole answer's: the echoed prompt's, then the completion's.
  std::optional<Logprobs> all_logprobs() const {
    if (!logprobs) return std::nullopt;
    Logprobs all = echoed.empty() ? Logprobs{} : echo_logprobs;
    all.tokens.insert(all.tokens.end(), pending.tokens.begin(), pending.tokens.end());
    all.text_offsets.insert(all.text_offsets.end(), pending.text_offsets.begin(), pending.text_offsets.end());
    return all;
  }

  // The completion generated so far, ended (its finish reason comes with
  // its outcome).
  CompletionChoice close_choice() { return {echoed + text + filter.flush(), "", all_logprobs()}; }

  // Keeps the completion and starts the next one.
  void next_choice() {
    finished.push_back(close_choice());
    filter = StopFilter(stop_sequences);
    text.clear();
    echo_logprobs = {};
    pending = {};
    prompt_offset = 0;
    completion_offset = prompt_bytes;
  }
};

// How a generation's failure is answered: the request's own fault (an
// unencodable prompt, one past the context) 400; a poisoned session, a
// session that refuses work or a server shutting down 503; else 500.
ApiError failure_error(const GenerationFailure& failure, const Exchange& exchange) {
  const GenerationResult& partial = failure.partial;
  if (failure.error.code() == ErrorCode::contract) {
    const bool too_long = static_cast<int>(partial.prompt_tokens.size()) > exchange.context;
    return bad_request(failure.message(), exchange.prompt_field, too_long ? "context_length_exceeded" : "");
  }
  const bool unavailable = partial.poisoned || failure.error.code() == ErrorCode::state;
  return server_error(unavailable ? 503 : 500, failure.message());
}

GenerationCounts counts_of(const GenerationResult& result) {
  GenerationCounts counts;
  counts.prompt_tokens = static_cast<int>(result.prompt_tokens.size());
  counts.generated_tokens = static_cast<int>(result.generated_tokens.size());
  counts.steps = result.generated_tokens.empty() ? 0 : 1 + result.decode_steps;
  counts.aborted_steps = result.aborted_steps;
  counts.retries = result.retries;
  counts.heals = result.heals;
  counts.poisoned = result.poisoned;
  counts.prefill_seconds = result.prefill_seconds;
  counts.prompt_cache_tokens_reused = result.prompt_cache_tokens_reused;
  counts.cached_prompt_tokens = result.cached_prompt_tokens();
  return counts;
}

// What the reply says of a request whose completions all ended well.
CompletionOutcome outcome_of(Exchange& exchange, const std::vector<GenerationOutcome>& outcomes) {
  CompletionOutcome done;
  exchange.finished.push_back(exchange.close_choice());
  done.choices = exchange.finished;
  const GenerationResult& first = *outcomes.front();
  done.prompt_tokens = static_cast<int>(first.prompt_tokens.size());
  done.cached_tokens = first.cached_prompt_tokens();
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    done.choices[i].finish_reason = finish_reason(outcomes[i]->stop_reason);
    done.completion_tokens += static_cast<int>(outcomes[i]->generated_tokens.size());
  }
  return done;
}

// The answer to a request whose generation failed; returns its status.
int answer_failure(Exchange& exchange, const GenerationFailure& failure) {
  Responder& responder = *exchange.responder;
  const ApiError error = failure_error(failure, exchange);
  if (!exchange.opened) {
    responder.respond(json_response(error.http_status, error.body()));
    return error.http_status;
  }
  responder.send_event(stream_error_event(error));
  responder.send_event(std::string(kStreamDone));
  responder.close_stream();
  return 200;
}

// The answer to a request whose completions ended, well or not (the last
// one run says which); returns its status.
int finish(Exchange& exchange, const std::vector<GenerationOutcome>& outcomes) {
  Responder& responder = *exchange.responder;
  if (responder.client_gone()) {
    if (exchange.opened)
      responder.close_stream();
    else
      responder.respond(json_response(kClientClosed, "{}"));
    return kClientClosed;
  }
  if (!outcomes.back()) return answer_failure(exchange, outcomes.back().error());
  const CompletionOutcome done = outcome_of(exchange, outcomes);
  if (!exchange.stream) {
    responder.respond(json_response(200, completion_body(exchange.header, done)));
    return 200;
  }
  exchange.open();
  // What the filter still held (streamed text is not in exchange.text).
  const CompletionChoice& only = done.choices.front();
  const std::string tail = only.text.substr(exchange.echoed.size());
  if (!tail.empty() || !exchange.pending.tokens.empty()) exchange.send_text(tail);
  responder.send_event(stream_finish_event(exchange.header, only.finish_reason));
  if (exchange.include_usage) responder.send_event(stream_usage_event(exchange.header, done));
  responder.send_event(std::string(kStreamDone));
  responder.close_stream();
  return 200;
}

// The scheduler's job for a request: the generation options it asks for
// (ServiceOptions fill in the rest), and callbacks that stream to its
// exchange and count in `metrics`.
Job job_for(std::string prompt, const CompletionRequest& wanted, const ServiceOptions& options, Metrics& metrics,
            const std::shared_ptr<Exchange>& exchange) {
  Job job;
  job.prompt = std::move(prompt);
  job.options.max_tokens = wanted.max_tokens.value_or(options.context);
  job.options.sampler = {wanted.temperature, wanted.top_p, wanted.seed.value_or(std::random_device{}())};
  job.choices = wanted.choices;
  job.options.prompt_cache = options.prompt_cache;
  job.options.retries = options.retries;
  job.options.heal_attempts = options.heal_attempts;
  job.options.emit_prompt = false;
  job.options.top_logprobs = wanted.top_logprobs;
  job.options.prompt_logprobs = wanted.echo && wanted.top_logprobs >= 0;
  // The job's callbacks hold the metrics, never the Service: the Scheduler may run a job's last step and its
  // on_done after the Service is gone (a shutdown destroys the Service before the Scheduler joins its workers).
  job.options.stop_requested = [&metrics, exchange] {
    const auto now = Clock::now();
    if (exchange->last_step != Clock::time_point{}) {
      metrics.observe_decode_step(std::chrono::duration<double>(now - exchange->last_step).count());
    }
    exchange->last_step = now;
    return exchange->filter.stopped();
  };
  job.on_choice = [exchange](int choice) {
    if (choice > 0) exchange->next_choice();
  };
  job.on_piece = [exchange](std::string_view piece) { exchange->take(piece); };
  if (wanted.top_logprobs >= 0) {
    job.options.on_logprobs = [exchange](const TokenLogprobs& token, bool of_prompt) {
      exchange->take_logprobs(token, of_prompt);
    };
  }
  job.abandoned = [exchange] { return exchange->responder->client_gone(); };
  job.on_done = [&metrics, exchange](const std::vector<GenerationOutcome>& outcomes) {
    for (const GenerationOutcome& outcome : outcomes) {
      metrics.count_generation(counts_of(outcome ? *outcome : outcome.error().partial));
    }
    metrics.count_request(exchange->path, finish(*exchange, outcomes));
    metrics.observe_request(exchange->path, std::chrono::duration<double>(Clock::now() - exchange->start).count());
  };
  return job;
}

}  // namespace

Service::Service(const Tokenizer& tokenizer, Scheduler& scheduler, Metrics& metrics, ServiceOptions options)
    : tokenizer_(tokenizer),
      scheduler_(scheduler),
      metrics_(metrics),
      options_(std::move(options)),
      key_digest_(digest_of(options_.api_key)),
      started_(unix_seconds()),
      status_feed_(metrics, options_.model_id) {}

void Service::answer(const std::string& endpoint, const std::shared_ptr<Responder>& responder, HttpResponse response) {
  metrics_.count_request(endpoint, response.status);
  responder->respond(std::move(response));
}

void Service::answer_error(const std::string& endpoint, const std::shared_ptr<Responder>& responder,
                           const ApiError& error) {
  answer(endpoint, responder, json_response(error.http_status, error.body()));
}

bool Service::authorized(const HttpRequest& request, std::string_view path) const {
  if (options_.api_key.empty() || path == "/health" || path == "/ready") return true;
  if (path == "/metrics" && options_.metrics_public) return true;  // not /status/events: it names the nodes
  const auto token = bearer_token(request.authorization);
  if (!token) return false;
  // In constant time: how long it takes tells nothing of how much of a
  // guessed key was right, nor of the key's length.
  const KeyDigest given = digest_of(*token);
  return CRYPTO_memcmp(given.data(), key_digest_.data(), given.size()) == 0;
}

void Service::shut_down() {
  shutting_down_ = true;
  status_feed_.close();
  scheduler_.shut_down();
}

void Service::handle(const HttpRequest& request, const std::shared_ptr<Responder>& responder) {
  const std::string path = request.target.substr(0, request.target.find('?'));
  if (request.method == "GET") {
    // The chat and status pages are open to all; what they ask for needs the key.
    if (const WebAsset* asset = find_web_asset(path)) {
      return answer("web", responder, web_response(*asset, request.if_none_match));
    }
  }
  if (!authorized(request, path)) {
    // OpenAI's answer to a missing or wrong key.
    const ApiError error{401,
                         request.authorization.empty() ? "no API key: send it as the header 'Authorization: Bearer KEY'"
                                                       : "the API key is not the server's (--api-key)",
                         "invalid_request_error", "", "invalid_api_key"};
    HttpResponse response = json_response(error.http_status, error.body());
    response.headers = "WWW-Authenticate: Bearer\r\n";
    return answer(path == kCompletionsPath || path == kChatPath ? path : "other", responder, std::move(response));
  }
  const bool get = request.method == "GET";
  const bool post = request.method == "POST";
  if (path == kCompletionsPath && post) return complete(request, Endpoint::completions, responder);
  if (path == kChatPath && post) return complete(request, Endpoint::chat_completions, responder);
  if (path == "/health" && get) return answer(path, responder, json_response(200, R"({"status":"ok"})"));
  if (path == "/ready" && get) {
    const bool slots_ready = scheduler_.ready();
    const char* state = shutting_down_ ? R"({"status":"shutting down"})"
                        : slots_ready  ? R"({"status":"ready"})"
                                       : R"({"status":"recovering"})";
    return answer(path, responder, json_response(!shutting_down_ && slots_ready ? 200 : 503, state));
  }
  if (path == "/v1/models" && get)
    return answer(path, responder, json_response(200, models_body(options_.model_id, started_, options_.context)));
  if (path == "/metrics" && get) {
    return answer(path, responder, {200, "text/plain; version=0.0.4", metrics_.prometheus_text(), {}});
  }
  if (path == kStatusEventsPath && get) {
    // Counted when it opens: a status stream ends only when its client goes.
    metrics_.count_request(path, 200);
    return status_feed_.subscribe(responder);
  }
  const bool known = path == kCompletionsPath || path == kChatPath || path == "/health" || path == "/ready" ||
                     path == "/v1/models" || path == "/metrics" || path == kStatusEventsPath;
  if (known) {
    return answer_error("other", responder,
                        ApiError{405, request.method + " is not allowed on " + path, "invalid_request_error", "", ""});
  }
  answer_error("other", responder,
               ApiError{404, "no endpoint " + request.method + " " + path, "invalid_request_error", "", "not_found"});
}

void Service::complete(const HttpRequest& request, Endpoint endpoint, const std::shared_ptr<Responder>& responder) {
  const std::string path(endpoint == Endpoint::completions ? kCompletionsPath : kChatPath);
  auto parsed = parse_request(request.body, endpoint);
  if (!parsed) return answer_error(path, responder, parsed.error());
  const CompletionRequest& wanted = *parsed;
  if (wanted.model != options_.model_id) {
    return answer_error(
        path, responder,
        ApiError{404, "the model '" + wanted.model + "' does not exist: this server serves '" + options_.model_id + "'",
                 "invalid_request_error", "model", "model_not_found"});
  }
  if (shutting_down_) return answer_error(path, responder, server_error(503, std::string(kShutdownMessage)));
  const bool chat = endpoint == Endpoint::chat_completions;
  std::string prompt = chat ? options_.chat_template.render(wanted.messages) : wanted.prompt;
  // The slot tokenizes the prompt and refuses it there when its tokens are
  // past the context; a prompt of more bytes than any context's tokens can
  // hold is refused here, before it waits in the queue.
  const std::size_t most_bytes = static_cast<std::size_t>(options_.context) * tokenizer_.longest_piece_bytes();
  if (prompt.size() > most_bytes) {
    return answer_error(path, responder,
                        bad_request("the prompt is " + std::to_string(prompt.size()) +
                                        " bytes long: more than the model's context of " +
                                        std::to_string(options_.context) + " tokens can hold (a token is at most " +
                                        std::to_string(tokenizer_.longest_piece_bytes()) + " bytes)",
                                    prompt_param(endpoint), "context_length_exceeded"));
  }

  std::vector<std::string> stops = wanted.stop;
  if (chat) {
    for (std::string& stop : options_.chat_template.stop_sequences()) stops.push_back(std::move(stop));
  }
  const std::uint64_t id = next_id_++;
  ReplyHeader header{(chat ? "chatcmpl-" : "cmpl-") + std::to_string(started_) + "-" + std::to_string(id),
                     unix_seconds(), options_.model_id, endpoint};
  auto exchange =
      std::make_shared<Exchange>(path, std::move(header), responder, wanted, std::move(stops), options_.context);

  Job job = job_for(std::move(prompt), wanted, options_, metrics_, exchange);
  if (!scheduler_.submit(std::move(job))) {
    if (shutting_down_) return answer_error(path, responder, server_error(503, std::string(kShutdownMessage)));
    return answer_error(path, responder,
                        ApiError{429, "the server is busy: its queue is full; try again later", "rate_limit_exceeded",
                                 "", "rate_limit_exceeded"});
  }
}

}  // namespace accord::serve
