#include "apps/accord/serve_http.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <atomic>
#include <csignal>
#include <deque>
#include <thread>
#include <optional>

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

// One client connection. It runs on the server's one I/O thread; the
// Responder posts onto it from the slots' threads.
//
// A request answered at once (GET) keeps the connection for the next; one
// answered later (a completion) is answered with Connection: close, and
// while it waits a read watches the socket, so that a client that closes
// is seen at once and its generation stopped.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, serve::Service& service, const HttpOptions& options)
      : stream_(std::move(socket)), deadline_(stream_.get_executor()), service_(service), options_(options) {}

  void read_request() {
    parser_.emplace();
    parser_->body_limit(options_.body_limit);
    // Its own timer, not the stream's expiry, which would close the socket
    // before the 408 could be written.
    timed_out_ = false;
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

  // What the Responder asks, on the I/O thread.
  void respond(const serve::HttpResponse& response) {
    const bool keep = answered_at_once_ && keep_alive_;
    std::string extra = "Content-Length: " + std::to_string(response.body.size()) + "\r\n";
    extra += keep ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
    write(head(response.status, response.content_type, extra) + response.body);
    finish(keep);
  }
  void open_stream() {
    write(head(200, "text/event-stream", "Cache-Control: no-cache\r\nConnection: close\r\n"));
  }
  void send(std::string bytes) { write(std::move(bytes)); }
  void finish(bool keep_alive) {
    answered_ = true;
    if (keep_alive) {
      next_after_writes_ = true;
    } else {
      close_after_writes_ = true;
    }
    if (!writing_) after_writes();
  }

 private:
  void on_request(beast::error_code error) {
    deadline_.cancel();
    if (error == http::error::end_of_stream) return close();
    if (error == http::error::body_limit) {
      return reject(413, "the request body is over " + std::to_string(options_.body_limit) + " bytes");
    }
    if (timed_out_) {
      // An idle keep-alive connection just closes; a slow request is told.
      // The parser takes no byte of an unfinished line: look at the buffer too.
      if (!parser_->got_some() && buffer_.size() == 0) return close();
      return reject(408, "the request did not arrive within " + std::to_string(options_.request_timeout.count()) +
                             " ms");
    }
    if (error == net::error::operation_aborted) return close();
    if (error) return reject(400, "malformed HTTP request: " + error.message());
    auto& request = parser_->get();
    keep_alive_ = request.keep_alive();
    serve::HttpRequest handed{std::string(request.method_string()), std::string(request.target()),
                              std::move(request.body())};
    spdlog::debug("{} {}", handed.method, handed.target);
    answered_ = false;
    answered_at_once_ = true;
    service_.handle(handed, responder());
    answered_at_once_ = false;
    if (!answered_) watch_for_close();
  }

  std::shared_ptr<serve::Responder> responder();

  void reject(int status, const std::string& message) {
    spdlog::debug("refused a request: {} {}", status, message);
    write(error_response(status, message));
    close_after_writes_ = true;
  }

  // Reads while the answer is pending: the end of the stream, or an
  // error, means the client went away.
  void watch_for_close() {
    stream_.socket().async_read_some(
        watch_buffer_.prepare(512), [self = shared_from_this()](beast::error_code error, std::size_t) {
          if (error) {
            self->gone_ = true;
            return;
          }
          if (!self->answered_) self->watch_for_close();  // bytes after the request: not answered
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

  void after_writes() {
    if (gone_ || close_after_writes_) return close();
    if (next_after_writes_) {
      next_after_writes_ = false;
      read_request();
    }
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  net::steady_timer deadline_;
  bool timed_out_ = false;
  serve::Service& service_;
  const HttpOptions& options_;
  beast::flat_buffer buffer_;
  beast::flat_buffer watch_buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<std::string> writes_;
  bool writing_ = false;
  bool keep_alive_ = false;
  bool answered_ = false;
  bool answered_at_once_ = false;
  bool close_after_writes_ = false;
  bool next_after_writes_ = false;
  std::atomic<bool> gone_{false};  // read by the slots' threads
};

// The Responder of one request. Called on the I/O thread (the service
// answering at once) it acts at once; from a slot's thread it posts onto
// the I/O thread.
class ConnectionResponder final : public serve::Responder {
 public:
  ConnectionResponder(std::shared_ptr<Connection> connection, net::any_io_executor executor)
      : connection_(std::move(connection)), executor_(std::move(executor)) {}

  void respond(serve::HttpResponse response) override {
    on_connection([response = std::move(response)](Connection& c) { c.respond(response); });
  }
  void open_stream() override {
    on_connection([](Connection& c) { c.open_stream(); });
  }
  void send_event(std::string event) override {
    on_connection([event = std::move(event)](Connection& c) mutable { c.send(std::move(event)); });
  }
  void close_stream() override {
    on_connection([](Connection& c) { c.finish(/*keep_alive=*/false); });
  }
  bool client_gone() const override { return connection_->gone(); }

 private:
  template <class Action>
  void on_connection(Action action) {
    if (std::this_thread::get_id() == io_thread_) return action(*connection_);
    net::post(executor_, [connection = connection_, action = std::move(action)]() mutable { action(*connection); });
  }

  std::shared_ptr<Connection> connection_;
  net::any_io_executor executor_;
  const std::thread::id io_thread_ = std::this_thread::get_id();
};

std::shared_ptr<serve::Responder> Connection::responder() {
  return std::make_shared<ConnectionResponder>(shared_from_this(), stream_.get_executor());
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
      return Error(ErrorCode::io, "cannot listen on " + options_.host + ":" + std::to_string(options_.port) + ": " +
                                      error.message());
    }
    const tcp::endpoint bound = acceptor_.local_endpoint();
    return bound.address().to_string() + ":" + std::to_string(bound.port());
  }

  void run(serve::Service& service) {
    service_ = &service;
    accept();
    net::signal_set signals(io_, SIGINT, SIGTERM);
    signals.async_wait([this](beast::error_code, int signal) {
      spdlog::info("signal {}: stopping", signal);
      io_.stop();
    });
    io_.run();
  }

 private:
  void accept() {
    acceptor_.async_accept(io_, [this](beast::error_code error, tcp::socket socket) {
      if (error) {
        spdlog::warn("accept failed: {}", error.message());
      } else {
        std::make_shared<Connection>(std::move(socket), *service_, options_)->read_request();
      }
      accept();
    });
  }

  const HttpOptions options_;
  net::io_context io_{1};
  tcp::acceptor acceptor_{io_};
  serve::Service* service_ = nullptr;
};

HttpServer::HttpServer(HttpOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
HttpServer::~HttpServer() = default;
Result<std::string> HttpServer::listen() { return impl_->listen(); }
void HttpServer::run(serve::Service& service) { impl_->run(service); }

}  // namespace accord::cli
