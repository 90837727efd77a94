// The HTTP/1.1 side of `accord serve`, on Boost.Beast: accepts connections,
// reads requests with a size limit and a deadline, hands them to the
// Service and writes its answers (whole, or a server-sent event stream).
// Beast stays in serve_http.cpp.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "runtime/base/error.hpp"
#include "runtime/serve/service.hpp"

namespace accord::cli {

struct HttpOptions {
  std::string host = "127.0.0.1";
  unsigned short port = 8080;  // 0: any free port
  std::size_t body_limit = 1 << 20;
  // A client must send a whole request within it (a slow client is cut
  // off with 408), and take each piece of an answer within it.
  std::chrono::milliseconds request_timeout{std::chrono::seconds(30)};
  // After SIGINT or SIGTERM, how long running requests may go on before
  // they are cut (docs/serve.md, "Shutdown").
  std::chrono::milliseconds shutdown_grace{std::chrono::seconds(10)};
};

// How serving ended.
enum class ServeEnd {
  drained,  // every request was answered: finished, refused 503, or cut at the grace period
  forced,   // a second signal ended it at once
};

class HttpServer {
 public:
  explicit HttpServer(HttpOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the address; returns it as HOST:PORT (the port chosen, for 0).
  Result<std::string> listen();
  // Serves `service` until SIGINT or SIGTERM, then shuts down gracefully:
  // no new connection, idle ones closed, queued and new completions
  // answered 503, running ones given the grace period, then cut.
  ServeEnd run(serve::Service& service);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace accord::cli
