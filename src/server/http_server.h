// An asynchronous HTTP/1.1 server on Boost.Asio/Beast: a few I/O threads serve thousands of connections (no
// thread per connection). A handler receives each parsed request and a ResponseChannel through which it answers
// once (a whole response) or as a stream of server-sent events; it may answer later from any thread. The channel
// reports a client that goes away while its request runs, so the work can be cancelled.
//
// Limits: request headers must arrive within header_timeout (a client trickling bytes is dropped), bodies over
// max_body_bytes get 413, malformed requests 400, and a client that stops reading its response is dropped after
// write_timeout.
#pragma once

#include <utility>  // before Boost 1.74 Asio, whose awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace moeserve::server {

namespace http = boost::beast::http;
using HttpRequest = http::request<http::string_body>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0 picks a free port (see HttpServer::port())
  int io_threads = 2;
  size_t max_body_bytes = 8 << 20;
  std::chrono::milliseconds header_timeout{30'000};
  std::chrono::milliseconds write_timeout{60'000};
};

class ResponseChannel {
 public:
  virtual ~ResponseChannel() = default;
  // A whole response; extra headers are (name, value) pairs.
  virtual void respond(unsigned status, std::string content_type, std::string body,
                       std::vector<std::pair<std::string, std::string>> extra_headers = {}) = 0;
  // A 200 text/event-stream response, sent chunk by chunk: start, any number of events, finish.
  virtual void start_events() = 0;
  // Sent as "data: <data>\n\n", preceded by "event: <name>\n" when a name is given (the Responses API's events).
  virtual void event(std::string data, std::string name = {}) = 0;
  virtual void finish_events() = 0;
  // Called at most once, from an I/O thread, if the client disconnects before the response is finished.
  virtual void on_disconnect(std::function<void()> callback) = 0;
};

using Handler = std::function<void(HttpRequest request, std::shared_ptr<ResponseChannel> channel)>;

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, Handler handler);
  ~HttpServer();

  // Binds and starts the I/O threads; fails (moeserve::Error) when the address cannot be bound.
  void start();
  uint16_t port() const { return port_; }
  // Closes the listening socket: no new connections; the ones open are served to the end.
  void stop_accepting();
  // Stops the I/O threads (open connections are closed) and joins them.
  void stop();
  size_t open_connections() const { return open_connections_.load(); }

  boost::asio::io_context& io_context() { return ioc_; }

 private:
  void accept();

  HttpServerOptions options_;
  Handler handler_;
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::vector<std::thread> threads_;
  uint16_t port_ = 0;
  std::atomic<size_t> open_connections_{0};
  bool started_ = false;
};

}  // namespace moeserve::server
