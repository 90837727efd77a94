// The HTTP service of `accord serve`, apart from HTTP's bytes: routes a
// request to its endpoint, answers at once or through the scheduler, and
// streams. apps/accord/serve_http.cpp reads requests off sockets and
// implements Responder over them; tests drive it with a Responder of their
// own.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/serve/chat_template.hpp"
#include "runtime/serve/metrics.hpp"
#include "runtime/serve/scheduler.hpp"
#include "runtime/serve/status_feed.hpp"
#include "runtime/text/tokenizer.hpp"

namespace accord::serve {

struct HttpRequest {
  std::string method;  // GET, POST, ...
  std::string target;  // the path, query included
  std::string body;
  std::string authorization;  // the Authorization header, or empty
  std::string if_none_match;  // the If-None-Match header, or empty
};

struct HttpResponse {
  int status = 200;  // a 304 is written without a body or its length
  std::string content_type = "application/json";
  std::string body;
  std::string headers;  // further header lines, each ending in CRLF
};

// One request's way back to its client. Any thread may call it; it
// answers exactly once: respond(), or open_stream() then events and
// close_stream().
class Responder {
 public:
  virtual ~Responder() = default;
  virtual void respond(HttpResponse response) = 0;
  virtual void open_stream() = 0;  // 200, text/event-stream
  virtual void send_event(std::string event) = 0;
  virtual void close_stream() = 0;
  // The client closed its connection: nobody reads the answer any more.
  virtual bool client_gone() const = 0;
};

// SHA-256, the form in which API keys are compared.
using KeyDigest = std::array<unsigned char, 32>;

struct ServiceOptions {
  std::string model_id;  // what /v1/models lists and requests name
  int context = 0;       // the model's context in tokens
  ChatTemplate chat_template;
  std::filesystem::path prompt_cache;  // empty: none
  int retries = GenerationOptions{}.retries;
  int heal_attempts = GenerationOptions{}.heal_attempts;
  // Non-empty: every endpoint but /health, /ready and the pages' files
  // (and /metrics, when metrics_public) asks for "Authorization: Bearer <api_key>";
  // /status/events asks for it even then.
  std::string api_key;
  bool metrics_public = false;
};

// Answers the HTTP API's requests and queues their generations on the Scheduler. The jobs it queues report to
// `metrics`, which must outlive the Scheduler; they do not need the Service, which may go first.
class Service {
 public:
  Service(const Tokenizer& tokenizer, Scheduler& scheduler, Metrics& metrics, ServiceOptions options);

  // Routes a request. It runs on the caller's thread (the server's one I/O
  // thread) and does no work that grows faster than the request's bytes:
  // tokenizing and the model's work run on the slots.
  void handle(const HttpRequest& request, const std::shared_ptr<Responder>& responder);
  // Counts an answer the HTTP side gave without handle() (a malformed or
  // oversized request, one that came too slowly).
  void count_refused(int http_status) { metrics_.count_request("other", http_status); }

  // A graceful shutdown, in two steps: shut_down() answers queued and new
  // completions 503 while running ones go on; stop_running() (at the end of
  // the grace period) ends each running one after its step: a stream with
  // an error event and [DONE], a whole answer with 503.
  void shut_down();
  void stop_running() { scheduler_.stop_running(); }

 private:
  bool authorized(const HttpRequest& request, std::string_view path) const;
  void complete(const HttpRequest& request, Endpoint endpoint, const std::shared_ptr<Responder>& responder);
  void answer(const std::string& endpoint, const std::shared_ptr<Responder>& responder, HttpResponse response);
  void answer_error(const std::string& endpoint, const std::shared_ptr<Responder>& responder, const ApiError& error);

  const Tokenizer& tokenizer_;
  Scheduler& scheduler_;
  Metrics& metrics_;
  const ServiceOptions options_;
  const KeyDigest key_digest_;  // of options_.api_key
  const std::int64_t started_;  // Unix seconds, the models' "created"
  StatusFeed status_feed_;      // GET /status/events
  std::atomic<std::uint64_t> next_id_{1};
  std::atomic<bool> shutting_down_{false};
};

}  // namespace accord::serve
