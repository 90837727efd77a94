#include "apps/accord/serve_http.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <csignal>
#include <deque>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

namespace accord::cli {

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

std::string head(int status, std::string_view content_type, std::string_view extra) {
  const auto reason = http::obsolete_reason(static_cast<http::status>(status));
  std::string text = "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) + "\r\n";
  text.append("Content-Type: ").append(content_type).append("\r\n").append(extra).append("\r\n");
  return text;
}

std::string error_response(int status, const std::string& message) {
  const std::string body = serve::ApiError{status, message, "invalid_request_error", "", ""}.body();
  return head(status, "application/json",
              "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n") +
         body;
}

class Connection;

// The server's connections, for a shutdown: how many are open, and each one
// to close or cut. On the I/O thread only.
class ConnectionSet {
 public:
  // Called when the last connection closes during a shutdown.
  explicit ConnectionSet(std::function<void()> all_closed) : all_closed_(std::move(all_closed)) {}

  void opened(const std::shared_ptr<Connection>& connection) {
    // Amortized: the list never holds many more than the open connections.
    if (connections_.size() >= 2 * static_cast<std::size_t>(open_) + 64) prune();
    connections_.push_back(connection);
    ++open_;
  }
  void closed() {
    --open_;
    if (shutting_down_ && open_ == 0) all_closed_();
  }
  template <class Action>
  void for_each(Action action) {
    prune();
    for (const auto& weak : connections_) {
      if (auto connection = weak.lock()) action(*connection);
    }
  }
  void begin_shutdown() {
    shutting_down_ = true;
    if (open_ == 0) all_closed_();
  }
  bool shutting_down() const { return shutting_down_; }

 private:
  void prune() {
    std::erase_if(connections_, [](const std::weak_ptr<Connection>& c) { return c.expired(); });
  }

  std::function<void()> all_closed_;
  std::vector<std::weak_ptr<Connection>> connections_;
  int open_ = 0;
  bool shutting_down_ = false;
};

// One client connection. It runs on the server's one I/O thread; the
// Responder posts onto it from the slots' threads.
//
// Answers keep the connection for the next request where the client asks,
// streams excepted (a stream ends by closing). While an answer is pending a
// read watches the socket, so that a client that closes is seen at once and
// its generation stopped; bytes it reads (a pipelined request) wait in the
// parser's buffer.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, serve::Service& service, const HttpOptions& options, ConnectionSet& set)
      : stream_(std::move(socket)),
        deadline_(stream_.get_executor()),
        service_(service),
        options_(options),
        set_(set) {}

  void read_request() {
    if (set_.shutting_down()) return close();
    parser_.emplace();
    parser_->body_limit(options_.body_limit);
    // Its own timer, not the stream's expiry, which would close the socket
    // before the 408 could be written.
    timed_out_ = false;
    reading_ = true;
    deadline_.expires_after(options_.request_timeout);
    deadline_.async_wait([self = shared_from_this()](beast::error_code error) {
      if (error) return;  // cancelled: the request arrived
      self->timed_out_ = true;
      beast::error_code ignored;
      self->stream_.socket().cancel(ignored);
    });
    stream_.expires_never();
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code error, std::size_t) { self->on_request(error); });
  }

  bool gone() const { return gone_.load(); }

  // What a request's Responder asks, on the I/O thread. An action for a
  // request that is no longer the current one, or already answered (cut at
  // a shutdown), is dropped.
  void respond(std::uint64_t request, const serve::HttpResponse& response) {
    if (!current(request)) return;
    const bool keep = keep_alive_ && !set_.shutting_down();
    // A 304 has no body, and no length but the one a 200 would give: none.
    std::string extra =
        response.status == 304 ? std::string() : "Content-Length: " + std::to_string(response.body.size()) + "\r\n";
    extra += response.headers;
    extra += keep ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
    write(head(response.status, response.content_type, extra) + response.body);
    finish(keep);
  }
  void open_stream(std::uint64_t request) {
    if (!current(request)) return;
    streaming_ = true;
    write(head(200, "text/event-stream", "Cache-Control: no-cache\r\nConnection: close\r\n"));
  }
  void send(std::uint64_t request, std::string bytes) {
    if (current(request)) write(std::move(bytes));
  }
  void close_stream(std::uint64_t request) {
    if (current(request)) finish(/*keep_alive=*/false);
  }

  // A shutdown began: an idle connection closes; one whose answer is
  // pending closes after it.
  void shut_down() {
    if (reading_) close();
  }
  // The grace period is over: a pending answer ends now, a stream with an
  // error event and [DONE], a whole answer with 503.
  void cut() {
    if (answered_ || reading_) return;
    const serve::ApiError error{503, std::string(serve::kShutdownCutMessage), "server_error", "", ""};
    if (streaming_) {
      write(serve::stream_error_event(error));
      write(std::string(serve::kStreamDone));
      finish(/*keep_alive=*/false);
    } else {
      respond(request_, {503, "application/json", error.body(), ""});
    }
  }

 private:
  bool current(std::uint64_t request) const { return request == request_ && !answered_; }

  void on_request(beast::error_code error) {
    deadline_.cancel();
    reading_ = false;
    if (closed_) return;
    if (error == http::error::end_of_stream) return close();
    if (error == http::error::body_limit) {
      return reject(413, "the request body is over " + std::to_string(options_.body_limit) + " bytes");
    }
    if (timed_out_) {
      // An idle keep-alive connection just closes; a slow request is told.
      // The parser takes no byte of an unfinished line: look at the buffer too.
      if (!parser_->got_some() && buffer_.size() == 0) return close();
      return reject(408,
                    "the request did not arrive within " + std::to_string(options_.request_timeout.count()) + " ms");
    }
    if (error == net::error::operation_aborted) return close();
    if (error) return reject(400, "malformed HTTP request: " + error.message());
    auto& request = parser_->get();
    keep_alive_ = request.keep_alive();
    serve::HttpRequest handed{std::string(request.method_string()), std::string(request.target()),
                              std::move(request.body()), std::string(request[http::field::authorization]),
                              std::string(request[http::field::if_none_match])};
    spdlog::debug("{} {}", handed.method, handed.target);
    ++request_;
    answered_ = false;
    streaming_ = false;
    service_.handle(handed, responder());
    if (!answered_) watch_for_close();
  }

  std::shared_ptr<serve::Responder> responder();

  void reject(int status, const std::string& message) {
    spdlog::debug("refused a request: {} {}", status, message);
    service_.count_refused(status);
    answered_ = true;  // nothing more for this connection, a shutdown's cut included
    write(error_response(status, message));
    close_after_writes_ = true;
  }

  void finish(bool keep_alive) {
    answered_ = true;
    if (keep_alive) {
      next_after_writes_ = true;
    } else {
      close_after_writes_ = true;
    }
    if (!writing_) after_writes();
  }

  // Reads while the answer is pending: the end of the stream, or an
  // error, means the client went away. What it reads is kept for the next
  // request, up to the body limit: a client that sends more before its
  // answer is cut off.
  void watch_for_close() {
    watching_ = true;
    stream_.socket().async_read_some(buffer_.prepare(512),
                                     [self = shared_from_this()](beast::error_code error, std::size_t bytes) {
                                       self->watching_ = false;
                                       self->buffer_.commit(bytes);
                                       const bool cancelled = error == net::error::operation_aborted && self->answered_;
                                       if ((error && !cancelled) || self->buffer_.size() > self->options_.body_limit) {
                                         self->gone_ = true;
                                         if (self->answered_) self->close();
                                         return;
                                       }
                                       if (!self->answered_) return self->watch_for_close();
                                       if (!self->writing_) self->after_writes();
                                     });
  }

  void write(std::string bytes) {
    if (gone_) return;
    writes_.push_back(std::move(bytes));
    if (!writing_) write_next();
  }

  void write_next() {
    writing_ = true;
    stream_.expires_after(options_.request_timeout);
    net::async_write(stream_, net::buffer(writes_.front()),
                     [self = shared_from_this()](beast::error_code error, std::size_t) {
                       self->writes_.pop_front();
                       if (error) {
                         self->gone_ = true;
                         self->writes_.clear();
                       }
                       if (!self->writes_.empty()) return self->write_next();
                       self->writing_ = false;
                       self->after_writes();
                     });
  }

  // Once the answer is written: the next request, after the watching read
  // is cancelled and has returned, or the close.
  void after_writes() {
    if (gone_ || close_after_writes_) return close();
    if (!next_after_writes_) return;
    if (watching_) {
      beast::error_code ignored;
      stream_.socket().cancel(ignored);  // its handler comes back here
      return;
    }
    next_after_writes_ = false;
    read_request();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
    set_.closed();
  }

  beast::tcp_stream stream_;
  net::steady_timer deadline_;
  bool timed_out_ = false;
  serve::Service& service_;
  const HttpOptions& options_;
  ConnectionSet& set_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<std::string> writes_;
  std::uint64_t request_ = 0;  // the current request's number on this connection
  bool reading_ = false;       // waiting for a request: idle
  bool watching_ = false;
  bool writing_ = false;
  bool keep_alive_ = false;
  bool answered_ = false;
  bool streaming_ = false;
  bool close_after_writes_ = false;
  bool next_after_writes_ = false;
  bool closed_ = false;
  std::atomic<bool> gone_{false};  // read by the slots' threads
};

// The Responder of one request. Called on the I/O thread (the service
// answering at once) it acts at once; from a slot's thread it posts onto
// the I/O thread.
class ConnectionResponder final : public serve::Responder, public std::enable_shared_from_this<ConnectionResponder> {
 public:
  ConnectionResponder(std::shared_ptr<Connection> connection, std::uint64_t request, net::any_io_executor executor)
      : connection_(std::move(connection)), request_(request), executor_(std::move(executor)) {}

  void respond(serve::HttpResponse response) override {
    on_connection([this, response = std::move(response)](Connection& c) { c.respond(request_, response); });
  }
  void open_stream() override {
    on_connection([this](Connection& c) { c.open_stream(request_); });
  }
  void send_event(std::string event) override {
    on_connection([this, event = std::move(event)](Connection& c) mutable { c.send(request_, std::move(event)); });
  }
  void close_stream() override {
    on_connection([this](Connection& c) { c.close_stream(request_); });
  }
  bool client_gone() const override { return connection_->gone(); }

 private:
  template <class Action>
  void on_connection(Action action) {
    if (std::this_thread::get_id() == io_thread_) return action(*connection_);
    // The posted action holds the responder, which holds the connection.
    net::post(executor_,
              [self = shared_from_this(), action = std::move(action)]() mutable { action(*self->connection_); });
  }

  std::shared_ptr<Connection> connection_;
  const std::uint64_t request_;
  net::any_io_executor executor_;
  const std::thread::id io_thread_ = std::this_thread::get_id();
};

std::shared_ptr<serve::Responder> Connection::responder() {
  return std::make_shared<ConnectionResponder>(shared_from_this(), request_, stream_.get_executor());
}

}  // namespace

class HttpServer::Impl {
 public:
  explicit Impl(HttpOptions options) : options_(std::move(options)) {}

  Result<std::string> listen() {
    beast::error_code error;
    const auto address = net::ip::make_address(options_.host, error);
    if (error) return Error(ErrorCode::contract, "--listen: '" + options_.host + "' is not an IP address");
    const tcp::endpoint endpoint(address, options_.port);
    acceptor_.open(endpoint.protocol(), error);
    if (!error) acceptor_.set_option(net::socket_base::reuse_address(true), error);
    if (!error) acceptor_.bind(endpoint, error);
    if (!error) acceptor_.listen(net::socket_base::max_listen_connections, error);
    if (error) {
      return Error(ErrorCode::io,
                   "cannot listen on " + options_.host + ":" + std::to_string(options_.port) + ": " + error.message());
    }
    const tcp::endpoint bound = acceptor_.local_endpoint();
    return bound.address().to_string() + ":" + std::to_string(bound.port());
  }

  ServeEnd run(serve::Service& service) {
    service_ = &service;
    accept();
    on_signals();
    io_.run();
    return end_;
  }

 private:
  void accept() {
    acceptor_.async_accept(io_, [this](beast::error_code error, tcp::socket socket) {
      if (error == net::error::operation_aborted) return;  // closed: shutting down
      if (error) {
        spdlog::warn("accept failed: {}", error.message());
      } else {
        auto connection = std::make_shared<Connection>(std::move(socket), *service_, options_, connections_);
        connections_.opened(connection);
        connection->read_request();
      }
      accept();
    });
  }

  // The first signal shuts down gracefully; a second ends at once.
  void on_signals() {
    signals_.async_wait([this](beast::error_code error, int signal) {
      if (error) return;
      if (connections_.shutting_down()) {
        spdlog::warn("signal {} again: stopping now", signal);
        end_ = ServeEnd::forced;
        return io_.stop();
      }
      spdlog::info("signal {}: shutting down; running requests have {} ms", signal, options_.shutdown_grace.count());
      shut_down();
      on_signals();
    });
  }

  void shut_down() {
    beast::error_code ignored;
    acceptor_.close(ignored);
    service_->shut_down();
    connections_.begin_shutdown();
    connections_.for_each([](Connection& c) { c.shut_down(); });
    grace_.expires_after(options_.shutdown_grace);
    grace_.async_wait([this](beast::error_code error) {
      if (error) return;
      spdlog::warn("the grace period is over: cutting the requests still running");
      service_->stop_running();
      connections_.for_each([](Connection& c) { c.cut(); });
      // What is left to write gets a moment, not a client's whole timeout.
      grace_.expires_after(kLastWrites);
      grace_.async_wait([this](beast::error_code late) {
        if (!late) io_.stop();
      });
    });
  }

  static constexpr std::chrono::seconds kLastWrites{1};

  const HttpOptions options_;
  net::io_context io_{1};
  tcp::acceptor acceptor_{io_};
  // Caught from construction on: a signal that comes between the address
  // line and run() (a script that reads the line and stops the server at
  // once) waits for run() instead of killing the process.
  net::signal_set signals_{io_, SIGINT, SIGTERM};
  net::steady_timer grace_{io_};
  ConnectionSet connections_{[this] { io_.stop(); }};
  serve::Service* service_ = nullptr;
  ServeEnd end_ = ServeEnd::drained;
};

HttpServer::HttpServer(HttpOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
HttpServer::~HttpServer() = default;
Result<std::string> HttpServer::listen() { return impl_->listen(); }
ServeEnd HttpServer::run(serve::Service& service) { return impl_->run(service); }

}  // namespace accord::cli
