#include "server/http_server.h"

#include <boost/beast/core.hpp>
#include <fmt/format.h>

#include <deque>
#include <optional>

#include "util/error.h"

namespace moeserve::server {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;

namespace {

std::string status_line(unsigned status) {
  return fmt::format("HTTP/1.1 {} {}\r\n", status, std::string(http::obsolete_reason(static_cast<http::status>(status))));
}

// One connection: reads requests one after another (keep-alive), hands each to the handler, and writes what the
// handler answers. Everything runs on the connection's strand; the channel posts onto it from other threads.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, const HttpServerOptions& options, const Handler& handler, std::atomic<size_t>& open)
      : stream_(std::move(socket)), options_(options), handler_(handler), open_(open) {
    ++open_;
  }
  ~Session() { --open_; }

  void start() { net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_request(); }); }

  // The channel's operations, on the strand. `generation` ties them to one request.
  void respond(uint64_t generation, unsigned status, std::string content_type, std::string body,
               std::vector<std::pair<std::string, std::string>> extra);
  void start_events(uint64_t generation);
  void event(uint64_t generation, std::string data, std::string name);
  void finish_events(uint64_t generation);
  void set_disconnect(uint64_t generation, std::function<void()> callback);
  net::any_io_executor executor() { return stream_.get_executor(); }

 private:
  void read_request();
  void on_read(beast::error_code ec);
  void watch_for_disconnect();
  void queue(std::string bytes, bool ends_response);
  void write_next();
  void response_done();
  void close();
  void client_gone();

  beast::tcp_stream stream_;
  const HttpServerOptions& options_;
  const Handler& handler_;
  std::atomic<size_t>& open_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;

  uint64_t generation_ = 0;  // the request being answered
  bool answering_ = false;   // between handing a request over and the end of its response
  bool keep_alive_ = false;
  char peek_byte_ = 0;  // target of the disconnect watch's peek
  bool response_started_ = false;
  bool watching_ = false;
  bool read_after_watch_ = false;
  bool closed_ = false;
  std::function<void()> on_disconnect_;
  std::deque<std::pair<std::string, bool>> writes_;  // bytes, ends the response
  bool writing_ = false;
};

class Channel : public ResponseChannel {
 public:
  Channel(std::shared_ptr<Session> session, uint64_t generation) : session_(std::move(session)), generation_(generation) {}
  void respond(unsigned status, std::string content_type, std::string body,
               std::vector<std::pair<std::string, std::string>> extra_headers) override {
    net::post(session_->executor(), [s = session_, g = generation_, status, t = std::move(content_type),
                                     b = std::move(body), h = std::move(extra_headers)]() mutable {
      s->respond(g, status, std::move(t), std::move(b), std::move(h));
    });
  }
  void start_events() override {
    net::post(session_->executor(), [s = session_, g = generation_] { s->start_events(g); });
  }
  void event(std::string data, std::string name) override {
    net::post(session_->executor(), [s = session_, g = generation_, d = std::move(data), n = std::move(name)]() mutable {
      s->event(g, std::move(d), std::move(n));
    });
  }
  void finish_events() override {
    net::post(session_->executor(), [s = session_, g = generation_] { s->finish_events(g); });
  }
  void on_disconnect(std::function<void()> callback) override {
    net::post(session_->executor(), [s = session_, g = generation_, c = std::move(callback)]() mutable {
      s->set_disconnect(g, std::move(c));
    });
  }

 private:
  std::shared_ptr<Session> session_;
  uint64_t generation_;
};

void Session::read_request() {
  if (closed_) return;
  parser_.emplace();
  parser_->body_limit(options_.max_body_bytes);
  parser_->header_limit(64 * 1024);
  stream_.expires_after(options_.header_timeout);
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
}

void Session::on_read(beast::error_code ec) {
  if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == net::error::operation_aborted ||
      ec == net::error::connection_reset || ec == net::error::eof) {
    close();
    return;
  }
  ++generation_;
  answering_ = true;
  response_started_ = false;
  on_disconnect_ = nullptr;
  if (ec) {
    // A malformed or oversized request: answer in OpenAI's error shape, then close (the stream is out of sync).
    const bool too_large = ec == http::error::body_limit || ec == http::error::buffer_overflow ||
                           ec == http::error::header_limit;
    keep_alive_ = false;
    const unsigned status = too_large ? 413 : 400;
    const std::string message = too_large ? fmt::format("request too large ({})", ec.message())
                                          : fmt::format("malformed HTTP request ({})", ec.message());
    respond(generation_, status, "application/json",
            fmt::format(R"({{"error":{{"message":"{}","type":"invalid_request_error","param":null,"code":null}}}})",
                        message),
            {});
    return;
  }
  stream_.expires_never();
  HttpRequest request = parser_->release();
  keep_alive_ = request.keep_alive();
  watch_for_disconnect();
  handler_(std::move(request), std::make_shared<Channel>(shared_from_this(), generation_));
}

// While a request runs, watch the socket with a one-byte peek: it completes with end of stream (or a reset) when
// the client closes, and with data when the client sends its next request early (pipelining), which then waits in
// the socket for read_request. A peek, unlike a bare readiness wait, is retried by the reactor when readiness was
// stale (an edge for bytes the request's own read already took), so neither case is mistaken for the other.
void Session::watch_for_disconnect() {
  watching_ = true;
  stream_.socket().async_receive(net::buffer(&peek_byte_, 1), tcp::socket::message_peek,
                                 [self = shared_from_this()](beast::error_code ec, size_t) {
                                   self->watching_ = false;
                                   if (self->read_after_watch_) {
                                     self->read_after_watch_ = false;
                                     self->read_request();
                                     return;
                                   }
                                   if (ec == net::error::operation_aborted || self->closed_) return;
                                   if (ec) self->client_gone();
                                 });
}

void Session::client_gone() {
  if (!answering_) return;
  auto callback = std::move(on_disconnect_);
  on_disconnect_ = nullptr;
  answering_ = false;
  close();
  if (callback) callback();
}

void Session::set_disconnect(uint64_t generation, std::function<void()> callback) {
  if (generation != generation_) return;
  if (!answering_ && closed_) {
    if (callback) callback();  // already gone
    return;
  }
  on_disconnect_ = std::move(callback);
}

void Session::respond(uint64_t generation, unsigned status, std::string content_type, std::string body,
                      std::vector<std::pair<std::string, std::string>> extra) {
  if (generation != generation_ || !answering_ || response_started_ || closed_) return;
  response_started_ = true;
  std::string head = status_line(status);
  head += fmt::format("Content-Type: {}\r\nContent-Length: {}\r\nConnection: {}\r\n", content_type, body.size(),
                      keep_alive_ ? "keep-alive" : "close");
  for (const auto& [name, value] : extra) head += fmt::format("{}: {}\r\n", name, value);
  head += "\r\n";
  queue(head + body, true);
}

void Session::start_events(uint64_t generation) {
  if (generation != generation_ || !answering_ || response_started_ || closed_) return;
  response_started_ = true;
  queue(status_line(200) +
            "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n"
            "Connection: " +
            (keep_alive_ ? std::string("keep-alive") : std::string("close")) + "\r\n\r\n",
        false);
}

void Session::event(uint64_t generation, std::string data, std::string name) {
  if (generation != generation_ || !answering_ || !response_started_ || closed_) return;
  std::string payload = (name.empty() ? std::string() : "event: " + name + "\n") + "data: " + data + "\n\n";
  queue(fmt::format("{:x}\r\n", payload.size()) + payload + "\r\n", false);
}

void Session::finish_events(uint64_t generation) {
  if (generation != generation_ || !answering_ || !response_started_ || closed_) return;
  queue("0\r\n\r\n", true);
}

void Session::queue(std::string bytes, bool ends_response) {
  writes_.emplace_back(std::move(bytes), ends_response);
  if (!writing_) write_next();
}

void Session::write_next() {
  if (writes_.empty() || closed_) {
    writing_ = false;
    return;
  }
  writing_ = true;
  stream_.expires_after(options_.write_timeout);
  auto& front = writes_.front();
  net::async_write(stream_, net::buffer(front.first), [self = shared_from_this()](beast::error_code ec, size_t) {
    self->stream_.expires_never();
    if (ec) {
      self->writing_ = false;
      self->client_gone();
      self->close();
      return;
    }
    const bool ended = self->writes_.front().second;
    self->writes_.pop_front();
    if (ended) self->response_done();
    self->write_next();
  });
}

void Session::response_done() {
  answering_ = false;
  on_disconnect_ = nullptr;
  if (!keep_alive_) {
    close();
    return;
  }
  if (watching_) {
    read_after_watch_ = true;
    beast::error_code ignored;
    stream_.socket().cancel(ignored);
  } else {
    read_request();
  }
}

void Session::close() {
  if (closed_) return;
  closed_ = true;
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.socket().close(ignored);
}

}  // namespace

HttpServer::HttpServer(HttpServerOptions options, Handler handler)
    : options_(std::move(options)), handler_(std::move(handler)), acceptor_(net::make_strand(ioc_)) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
  beast::error_code ec;
  const auto address = net::ip::make_address(options_.host, ec);
  MOESERVE_CHECK(!ec, "--host {}: not an IP address ({})", options_.host, ec.message());
  tcp::endpoint endpoint(address, options_.port);
  acceptor_.open(endpoint.protocol(), ec);
  MOESERVE_CHECK(!ec, "cannot open a socket for {}:{}: {}", options_.host, options_.port, ec.message());
  acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  acceptor_.bind(endpoint, ec);
  MOESERVE_CHECK(!ec, "cannot bind {}:{}: {}", options_.host, options_.port, ec.message());
  acceptor_.listen(net::socket_base::max_listen_connections, ec);
  MOESERVE_CHECK(!ec, "cannot listen on {}:{}: {}", options_.host, options_.port, ec.message());
  port_ = acceptor_.local_endpoint().port();
  accept();
  started_ = true;
  for (int i = 0; i < std::max(1, options_.io_threads); ++i) threads_.emplace_back([this] { ioc_.run(); });
}

void HttpServer::accept() {
  acceptor_.async_accept(net::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) {
      socket.set_option(tcp::no_delay(true), ec);
      std::make_shared<Session>(std::move(socket), options_, handler_, open_connections_)->start();
    }
    accept();
  });
}

void HttpServer::stop_accepting() {
  net::post(acceptor_.get_executor(), [this] {
    beast::error_code ignored;
    acceptor_.close(ignored);
  });
}

void HttpServer::stop() {
  if (!started_) return;
  started_ = false;
  ioc_.stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

}  // namespace moeserve::server
