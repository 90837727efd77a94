// The HTTP service of `accord serve`, apart from HTTP's bytes: routes a
// request to its endpoint, answers at once or through the scheduler, and
// streams. apps/accord/serve_http.cpp reads requests off sockets and
// implements Responder over them; tests drive it with a Responder of their
// own.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/model/tokenizer.hpp"
#include "runtime/serve/chat_template.hpp"
#include "runtime/serve/metrics.hpp"
#include "runtime/serve/scheduler.hpp"

namespace accord::serve {

struct HttpRequest {
  std::string method;  // GET, POST, ...
  std::string target;  // the path, query included
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
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

struct ServiceOptions {
  std::string model_id;  // what /v1/models lists and requests name
  int context = 0;       // the model's context in tokens
  ChatTemplate chat_template;
  std::filesystem::path prompt_cache;  // empty: none
  int retries = GenerationOptions{}.retries;
  int heal_attempts = GenerationOptions{}.heal_attempts;
};

// Answers the HTTP API's requests and queues their generations on the Scheduler. The jobs it queues report to
// `metrics`, which must outlive the Scheduler; they do not need the Service, which may go first.
class Service {
 public:
  Service(const Tokenizer& tokenizer, Scheduler& scheduler, Metrics& metrics, ServiceOptions options);

  void handle(const HttpRequest& request, const std::shared_ptr<Responder>& responder);

 private:
  void complete(const HttpRequest& request, Endpoint endpoint, const std::shared_ptr<Responder>& responder);
  void answer(const std::string& endpoint, const std::shared_ptr<Responder>& responder, HttpResponse response);
  void answer_error(const std::string& endpoint, const std::shared_ptr<Responder>& responder, const ApiError& error);

  const Tokenizer& tokenizer_;
  Scheduler& scheduler_;
  Metrics& metrics_;
  const ServiceOptions options_;
  const std::int64_t started_;  // Unix seconds, the models' "created"
  std::atomic<std::uint64_t> next_id_{1};
};

}  // namespace accord::serve
