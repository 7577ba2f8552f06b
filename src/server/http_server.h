// An asynchronous HTTP/1.1 server on Boost.Asio/Beast: a few I/O threads serve thousands of connections (no
// thread per connection). A handler receives each parsed request and a ResponseChannel through which it answers
// once (a whole response) or as a stream of server-sent events; it may answer later from any thread. The channel
// reports a client that goes away while its request runs, so the work can be cancelled.
//
// Whatever a client sends, the server answers or drops it and goes on serving: requests are read under the
// limits of HttpRequestReader (400, 413, 431, 501, each with an OpenAI-shaped JSON body naming the rule); a
// request that does not arrive complete within request_timeout of its first byte gets 408; a keep-alive
// connection with no request for idle_timeout is closed; a client that stops reading its response is dropped
// after write_timeout. A handler that throws, or drops its channel without answering, gets a 500 (or, mid-stream,
// an error event that ends the stream), logged with its route. When descriptors run out accept() pauses for
// accept_backoff instead of spinning. HTTP/1.0 clients get no chunked encoding: a stream to one ends at close.
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

#include "server/http_request_reader.h"

namespace moeserve::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0 picks a free port (see HttpServer::port())
  int io_threads = 2;
  size_t max_body_bytes = 8 << 20;     // 413 above (serve --max-body)
  size_t max_header_bytes = 64 << 10;  // request line + headers, and a chunked body's trailer section: 431 above
  size_t max_header_fields = 100;      // header fields, and trailer fields: 431 above
  // From a request's first byte to its last (headers and body): a client trickling bytes or sending half a
  // request gets 408 and is closed.
  std::chrono::milliseconds request_timeout{30'000};
  // A connection waiting for its next request is closed after this (uvicorn's --timeout-keep-alive, which vLLM
  // serves under, defaults to 5 s).
  std::chrono::milliseconds idle_timeout{5'000};
  std::chrono::milliseconds write_timeout{60'000};  // one write of a response that the client does not read
  std::chrono::milliseconds accept_backoff{100};    // accepts pause this long when descriptors run out
  // CORS (vLLM's --allowed-origins): origins whose browser pages may call the server ("*": any). Responses to an
  // allowed Origin carry Access-Control-Allow-Origin, and preflight OPTIONS requests are answered here (204),
  // before the handler and its API key check, as browsers send them without credentials. Empty: no CORS headers.
  std::vector<std::string> allowed_origins{};
  // One line per response on stderr as uvicorn writes them under vLLM: client "METHOD target HTTP/1.1" status.
  bool access_log = false;
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
  // Episodes in which accept() ran out of descriptors (EMFILE, ENFILE, ENOBUFS, ENOMEM) and paused.
  size_t descriptor_shortages() const { return descriptor_shortages_.load(); }

  boost::asio::io_context& io_context() { return ioc_; }

 private:
  void accept();
  void pause_accepting(const boost::system::error_code& ec);
  void run_io();

  HttpServerOptions options_;
  Handler handler_;
  boost::asio::io_context ioc_;
  // The I/O threads run until stop(), even with no connection and no acceptor: a channel released later still
  // posts its last word to its connection (which holds the connection's count until then).
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> keep_running_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer accept_pause_;  // on the acceptor's strand
  size_t failed_accepts_ = 0;              // in the current descriptor shortage; 0 when there is none
  std::vector<std::thread> threads_;
  uint16_t port_ = 0;
  std::atomic<size_t> open_connections_{0};
  std::atomic<size_t> descriptor_shortages_{0};
  bool started_ = false;
};

}  // namespace moeserve::server
