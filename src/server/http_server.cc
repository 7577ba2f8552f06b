#include "server/http_server.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <optional>

#include "server/api_error.h"
#include "util/error.h"
#include "util/log.h"

namespace moeserve::server {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using Headers = std::vector<std::pair<std::string, std::string>>;

namespace {

// RFC 9110 §6.2: a server answers with the highest version it conforms to, HTTP/1.0 clients included.
std::string status_line(unsigned status) {
  return fmt::format("HTTP/1.1 {} {}\r\n", status, std::string(http::obsolete_reason(static_cast<http::status>(status))));
}

std::string error_body(unsigned status, const std::string& message) {
  return ApiError(status, message, status >= 500 ? "server_error" : "invalid_request_error")
      .to_json()
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

// After an error response the server closes the connection, but first reads and drops what the client is still
// sending for a moment (RFC 9112 §9.6: closing with unread input makes TCP reset the connection, which can
// destroy the response before the client reads it).
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr size_t kLingerBytes = 1 << 20;

// One connection: reads requests one after another (keep-alive, pipelining), hands each to the handler, and
// writes what the handler answers. Everything runs on the connection's strand; the channel posts onto it from
// other threads.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, const HttpServerOptions& options, const Handler& handler, std::atomic<size_t>& open)
      : socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        options_(options),
        handler_(handler),
        open_(open),
        reader_(HttpLimits{options.max_header_bytes, options.max_header_fields, options.max_body_bytes}) {
    ++open_;
  }
  ~Session() { --open_; }

  void start() { net::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->read_request(); }); }

  // The channel's operations, on the strand. `generation` ties them to one request.
  void respond(uint64_t generation, unsigned status, std::string content_type, std::string body, Headers extra);
  void start_events(uint64_t generation);
  void event(uint64_t generation, std::string data, std::string name);
  void finish_events(uint64_t generation);
  void set_disconnect(uint64_t generation, std::function<void()> callback);
  // The handler failed: a 500 in OpenAI's error shape or, once a stream has begun, an error event that ends it.
  void internal_error(uint64_t generation, const std::string& message);
  // The last reference to the request's channel is gone: if no answer was given, none will come.
  void abandoned(uint64_t generation);
  net::any_io_executor executor() { return socket_.get_executor(); }

 private:
  enum class Phase { reading, answering, lingering, closed };
  enum class Reply { none, streaming, done };  // how much of the current response has been queued
  enum class Deadline { none, idle, request, write, linger };

  void read_request();
  void process();
  void on_header();
  void read_more();
  void dispatch();
  void reject(unsigned status, const std::string& message);
  // A CORS preflight (OPTIONS with Access-Control-Request-Method) from an allowed origin: answered 204 here.
  bool answer_preflight(const HttpRequest& request);
  void log_access(unsigned status) const;
  void watch_for_disconnect();
  void queue(std::string bytes, bool ends_response);
  void write_next();
  void response_done();
  void linger();
  void drop_input();
  void close();
  void client_gone();
  void arm(Deadline kind, Clock::time_point at);
  void disarm();
  void on_deadline(Deadline kind);
  bool current(uint64_t generation) const { return generation == generation_ && phase_ == Phase::answering; }

  tcp::socket socket_;
  net::steady_timer timer_;  // the one deadline pending: see Deadline
  const HttpServerOptions& options_;
  const Handler& handler_;
  std::atomic<size_t>& open_;
  HttpRequestReader reader_;

  Phase phase_ = Phase::reading;
  Deadline deadline_ = Deadline::none;
  Clock::time_point deadline_at_;
  Clock::time_point idle_deadline_;                     // for the next request to begin
  std::optional<Clock::time_point> request_deadline_;  // for the request begun to arrive whole

  uint64_t generation_ = 0;  // the request being answered
  Reply reply_ = Reply::none;
  bool keep_alive_ = false;
  bool http10_ = false;       // the client speaks HTTP/1.0: no chunked encoding
  bool head_request_ = false;  // HEAD: headers only
  std::string cors_headers_;   // for an allowed Origin: the Access-Control-* lines every response carries
  bool error_reply_ = false;   // the reply refuses the request: the connection closes after it
  std::string route_;          // "METHOD target", for the log

  char peek_byte_ = 0;  // target of the disconnect watch's peek
  bool watching_ = false;
  bool read_after_watch_ = false;
  std::function<void()> on_disconnect_;
  std::deque<std::pair<std::string, bool>> writes_;  // bytes, ends the response
  bool writing_ = false;
  std::vector<char> dropped_;  // lingering reads land here
  size_t dropped_bytes_ = 0;
};

class Channel : public ResponseChannel {
 public:
  Channel(std::shared_ptr<Session> session, uint64_t generation) : session_(std::move(session)), generation_(generation) {}
  ~Channel() override {
    try {
      net::post(session_->executor(), [s = session_, g = generation_] { s->abandoned(g); });
    } catch (const std::exception&) {  // out of memory: the write timeout or the client's own will end it
    }
  }
  void respond(unsigned status, std::string content_type, std::string body, Headers extra_headers) override {
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
  if (phase_ == Phase::closed) return;
  phase_ = Phase::reading;
  reader_.next_request();
  idle_deadline_ = Clock::now() + options_.idle_timeout;
  request_deadline_.reset();
  process();
}

void Session::process() {
  switch (reader_.parse()) {
    case HttpRequestReader::Progress::need_more: return read_more();
    case HttpRequestReader::Progress::header_done: return on_header();
    case HttpRequestReader::Progress::complete: return dispatch();
    case HttpRequestReader::Progress::failed: return reject(reader_.failure().status, reader_.failure().message);
  }
}

// RFC 9110 §10.1.1: 100-continue is the one expectation there is (others get 417); a client that sent it waits
// for "100 Continue" before its body, unless it sent the body already. An HTTP/1.0 request's expectation is ignored.
void Session::on_header() {
  const HttpRequest& head = reader_.request();
  const auto expect = head[http::field::expect];
  if (!expect.empty() && head.version() >= 11) {
    if (!beast::iequals(expect, "100-continue"))
      return reject(417, fmt::format("Expect: {} is not supported (only 100-continue)", std::string(expect)));
    if (!reader_.body_started()) queue(std::string(kContinue), false);
  }
  process();
}

void Session::read_more() {
  if (!request_deadline_ && reader_.started()) request_deadline_ = Clock::now() + options_.request_timeout;
  if (request_deadline_) arm(Deadline::request, *request_deadline_);
  else arm(Deadline::idle, idle_deadline_);
  socket_.async_read_some(reader_.prepare(), [self = shared_from_this()](error_code ec, size_t n) {
    if (self->phase_ != Phase::reading) return;  // refused meanwhile (408), or closed
    if (ec) return self->close();                // the client went away
    self->reader_.commit(n);
    self->process();
  });
}

void Session::dispatch() {
  disarm();
  ++generation_;
  phase_ = Phase::answering;
  reply_ = Reply::none;
  error_reply_ = false;
  on_disconnect_ = nullptr;
  HttpRequest request = reader_.release();
  keep_alive_ = request.keep_alive();  // HTTP/1.0: only with "Connection: keep-alive"
  http10_ = request.version() < 11;
  head_request_ = request.method() == http::verb::head;
  route_ = fmt::format("{} {}", std::string(request.method_string()), std::string(request.target().substr(0, 200)));
  cors_headers_.clear();
  const auto origin = request[http::field::origin];
  const auto& allowed = options_.allowed_origins;
  if (!origin.empty() && (std::find(allowed.begin(), allowed.end(), "*") != allowed.end() ||
                          std::find(allowed.begin(), allowed.end(), std::string(origin)) != allowed.end()))
    cors_headers_ = fmt::format("Access-Control-Allow-Origin: {}\r\nVary: Origin\r\n", std::string(origin));
  if (answer_preflight(request)) return;
  watch_for_disconnect();
  // The handler gets a copy of the channel: this one outlives a throwing handler's, so the 500 below is posted
  // before the channel's release reports it unanswered.
  const auto channel = std::make_shared<Channel>(shared_from_this(), generation_);
  std::string failure;
  try {
    handler_(std::move(request), channel);
  } catch (const std::exception& e) {
    failure = fmt::format("the request handler threw: {}", e.what());
  } catch (...) {
    failure = "the request handler threw a non-standard exception";
  }
  if (failure.empty()) return;
  fmt::print(stderr, "moeserve: {}: {}\n", route_, failure);
  net::post(socket_.get_executor(), [self = shared_from_this(), g = generation_, failure] {
    self->internal_error(g, "internal server error: " + failure);
  });
}

bool Session::answer_preflight(const HttpRequest& request) {
  if (request.method() != http::verb::options || cors_headers_.empty()) return false;
  const auto method = request[http::field::access_control_request_method];
  if (method.empty()) return false;
  const auto headers = request[http::field::access_control_request_headers];
  // Fetch's CORS protocol: the methods and headers the actual request may use, and how long to cache the answer.
  std::string allow = cors_headers_ + "Access-Control-Allow-Methods: GET, POST, OPTIONS\r\nAccess-Control-Max-Age: 600\r\n";
  if (!headers.empty()) allow += fmt::format("Access-Control-Allow-Headers: {}\r\n", std::string(headers));
  reply_ = Reply::done;
  log_access(204);
  queue(status_line(204) + allow + (keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n"),
        true);
  return true;
}

void Session::log_access(unsigned status) const {
  if (!options_.access_log) return;
  error_code ec;
  const auto peer = socket_.remote_endpoint(ec);
  const std::string client = ec ? "-" : fmt::format("{}:{}", peer.address().to_string(), peer.port());
  log_info("{} - \"{} HTTP/1.{}\" {} {}", client, route_, http10_ ? 0 : 1, status,
           std::string(http::obsolete_reason(static_cast<http::status>(status))));
}

void Session::reject(unsigned status, const std::string& message) {
  ++generation_;
  phase_ = Phase::answering;
  reply_ = Reply::none;
  keep_alive_ = false;
  http10_ = false;
  head_request_ = false;
  error_reply_ = true;
  cors_headers_.clear();
  route_ = "(unreadable request)";
  respond(generation_, status, "application/json", error_body(status, message), {});
}

void Session::internal_error(uint64_t generation, const std::string& message) {
  if (!current(generation)) return;
  if (reply_ == Reply::none) {
    respond(generation, 500, "application/json", error_body(500, message), {});
  } else if (reply_ == Reply::streaming) {
    event(generation, error_body(500, message), {});
    finish_events(generation);
  }
}

void Session::abandoned(uint64_t generation) {
  if (!current(generation) || reply_ == Reply::done) return;
  fmt::print(stderr, "moeserve: {}: the request handler let go of the request without finishing its answer\n", route_);
  internal_error(generation, "internal server error: the request handler finished without a complete response");
}

// While a request runs, watch the socket with a one-byte peek: it completes with end of stream (or a reset) when
// the client closes, and with data when the client sends its next request early (pipelining), which then waits in
// the socket for read_request. A peek, unlike a bare readiness wait, is retried by the reactor when readiness was
// stale (an edge for bytes the request's own read already took), so neither case is mistaken for the other.
void Session::watch_for_disconnect() {
  watching_ = true;
  socket_.async_receive(net::buffer(&peek_byte_, 1), tcp::socket::message_peek,
                        [self = shared_from_this()](error_code ec, size_t) {
                          self->watching_ = false;
                          if (self->read_after_watch_) {
                            self->read_after_watch_ = false;
                            self->read_request();
                            return;
                          }
                          if (ec == net::error::operation_aborted || self->phase_ == Phase::closed) return;
                          if (ec) self->client_gone();
                        });
}

void Session::client_gone() {
  const bool was_answering = phase_ == Phase::answering;
  auto callback = std::move(on_disconnect_);
  on_disconnect_ = nullptr;
  close();
  if (was_answering && callback) callback();
}

void Session::set_disconnect(uint64_t generation, std::function<void()> callback) {
  if (generation != generation_) return;
  if (phase_ == Phase::closed) {
    if (callback) callback();  // already gone
    return;
  }
  if (phase_ == Phase::answering) on_disconnect_ = std::move(callback);
}

void Session::respond(uint64_t generation, unsigned status, std::string content_type, std::string body, Headers extra) {
  if (!current(generation) || reply_ != Reply::none) return;
  reply_ = Reply::done;
  log_access(status);
  std::string message = status_line(status) + cors_headers_;
  message += fmt::format("Content-Type: {}\r\nContent-Length: {}\r\nConnection: {}\r\n", content_type, body.size(),
                         keep_alive_ ? "keep-alive" : "close");
  for (const auto& [name, value] : extra) message += fmt::format("{}: {}\r\n", name, value);
  message += "\r\n";
  if (!head_request_) message += body;  // RFC 9110 §9.3.2: a response to HEAD has no content
  queue(std::move(message), true);
}

void Session::start_events(uint64_t generation) {
  if (!current(generation) || reply_ != Reply::none) return;
  reply_ = Reply::streaming;
  // RFC 9112 §6.3 and §7: HTTP/1.0 has no chunked coding; the stream's end is the connection's close.
  if (http10_) keep_alive_ = false;
  log_access(200);
  std::string head = status_line(200) + cors_headers_ + "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\n";
  if (!http10_) head += "Transfer-Encoding: chunked\r\n";
  head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  queue(std::move(head), false);
}

void Session::event(uint64_t generation, std::string data, std::string name) {
  if (!current(generation) || reply_ != Reply::streaming || head_request_) return;
  std::string payload = (name.empty() ? std::string() : "event: " + name + "\n") + "data: " + data + "\n\n";
  if (!http10_) payload = fmt::format("{:x}\r\n", payload.size()) + payload + "\r\n";
  queue(std::move(payload), false);
}

void Session::finish_events(uint64_t generation) {
  if (!current(generation) || reply_ != Reply::streaming) return;
  reply_ = Reply::done;
  queue(http10_ || head_request_ ? std::string() : std::string("0\r\n\r\n"), true);
}

void Session::queue(std::string bytes, bool ends_response) {
  writes_.emplace_back(std::move(bytes), ends_response);
  if (!writing_) write_next();
}

// A response's writes run under the write deadline; an interim 100 Continue stays under the request's.
void Session::write_next() {
  if (writes_.empty() || phase_ == Phase::closed) {
    writing_ = false;
    if (deadline_ == Deadline::write) disarm();
    return;
  }
  writing_ = true;
  if (phase_ == Phase::answering) arm(Deadline::write, Clock::now() + options_.write_timeout);
  net::async_write(socket_, net::buffer(writes_.front().first), [self = shared_from_this()](error_code ec, size_t) {
    if (ec) {
      self->writing_ = false;
      self->client_gone();
      return;
    }
    const bool ended = self->writes_.front().second;
    self->writes_.pop_front();
    if (ended) self->response_done();
    self->write_next();
  });
}

void Session::response_done() {
  if (phase_ != Phase::answering) return;
  on_disconnect_ = nullptr;
  if (!keep_alive_) return error_reply_ ? linger() : close();
  phase_ = Phase::reading;
  if (watching_) {
    read_after_watch_ = true;
    error_code ignored;
    socket_.cancel(ignored);
  } else {
    read_request();
  }
}

void Session::linger() {
  phase_ = Phase::lingering;
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
  arm(Deadline::linger, Clock::now() + kLingerTime);
  dropped_.resize(4096);
  drop_input();
}

void Session::drop_input() {
  socket_.async_read_some(net::buffer(dropped_), [self = shared_from_this()](error_code ec, size_t n) {
    if (self->phase_ != Phase::lingering) return;
    self->dropped_bytes_ += n;
    if (ec || self->dropped_bytes_ > kLingerBytes) return self->close();
    self->drop_input();
  });
}

void Session::close() {
  if (phase_ == Phase::closed) return;
  phase_ = Phase::closed;
  disarm();
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

void Session::arm(Deadline kind, Clock::time_point at) {
  if (deadline_ == kind && deadline_at_ == at) return;
  deadline_ = kind;
  deadline_at_ = at;
  timer_.expires_at(at);
  timer_.async_wait([self = shared_from_this(), kind, at](error_code ec) {
    if (ec || self->phase_ == Phase::closed || self->deadline_ != kind || self->deadline_at_ != at) return;
    self->deadline_ = Deadline::none;
    self->on_deadline(kind);
  });
}

void Session::disarm() {
  deadline_ = Deadline::none;
  timer_.cancel();
}

void Session::on_deadline(Deadline kind) {
  error_code ignored;
  switch (kind) {
    case Deadline::idle:
    case Deadline::linger:
      return close();
    case Deadline::request:
      socket_.cancel(ignored);  // the pending read
      return reject(408, fmt::format("the request did not arrive complete within {} ms of its first byte (the "
                                     "limit)", options_.request_timeout.count()));
    case Deadline::write:
      return client_gone();
    case Deadline::none:
      return;
  }
}

bool is_descriptor_shortage(const error_code& ec) {
  if (ec.category() != boost::system::system_category()) return false;
  return ec.value() == EMFILE || ec.value() == ENFILE || ec.value() == ENOBUFS || ec.value() == ENOMEM;
}

}  // namespace

HttpServer::HttpServer(HttpServerOptions options, Handler handler)
    : options_(std::move(options)),
      handler_(std::move(handler)),
      keep_running_(net::make_work_guard(ioc_)),
      acceptor_(net::make_strand(ioc_)),
      accept_pause_(acceptor_.get_executor()) {}

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
  for (int i = 0; i < std::max(1, options_.io_threads); ++i) threads_.emplace_back([this] { run_io(); });
}

// Asio lets an exception from a completion handler out of run(); the server logs it and runs on, so no client can
// stop the process by making some handler throw.
void HttpServer::run_io() {
  while (true) {
    try {
      ioc_.run();
      return;
    } catch (const std::exception& e) {
      fmt::print(stderr, "moeserve: an HTTP I/O handler threw (the server continues): {}\n", e.what());
    }
  }
}

void HttpServer::accept() {
  acceptor_.async_accept(net::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
    if (is_descriptor_shortage(ec)) return pause_accepting(ec);
    if (failed_accepts_ > 0) {
      fmt::print(stderr, "moeserve: accepting connections again ({} accept attempts failed meanwhile)\n",
                 failed_accepts_);
      failed_accepts_ = 0;
    }
    if (!ec) {
      try {
        socket.set_option(tcp::no_delay(true), ec);
        std::make_shared<Session>(std::move(socket), options_, handler_, open_connections_)->start();
      } catch (const std::exception& e) {
        fmt::print(stderr, "moeserve: cannot start a connection: {}\n", e.what());
      }
    }
    accept();
  });
}

// Out of descriptors, accept() fails at once for as long as connections wait in the backlog: retrying at once would
// spin a core. The server pauses instead, keeps serving the connections it holds (their closing frees
// descriptors), and says so once per episode.
void HttpServer::pause_accepting(const boost::system::error_code& ec) {
  if (failed_accepts_++ == 0) {
    ++descriptor_shortages_;
    fmt::print(stderr, "moeserve: cannot accept connections ({}); retrying every {} ms while {} stay served\n",
               ec.message(), options_.accept_backoff.count(), open_connections_.load());
  }
  accept_pause_.expires_after(options_.accept_backoff);
  accept_pause_.async_wait([this](beast::error_code wait_ec) {
    if (wait_ec || !acceptor_.is_open()) return;
    accept();
  });
}

void HttpServer::stop_accepting() {
  net::post(acceptor_.get_executor(), [this] {
    beast::error_code ignored;
    acceptor_.close(ignored);
    accept_pause_.cancel();
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
