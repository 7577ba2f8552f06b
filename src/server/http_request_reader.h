// Reads HTTP/1.x requests, one after another, from the bytes a connection delivers, under the server's limits,
// with no I/O of its own: the session feeds it what the socket gives, the fuzz target feeds it anything. Every
// byte a client sends is bounded: what waits unparsed (a head, a chunk-size line, a trailer section) never exceeds
// max_header_bytes, a body never exceeds max_body_bytes (a chunked one is refused at the chunk that crosses the
// limit, before it is buffered). A request that breaks a rule gets a failure naming the rule and the status a
// client expects: 400 malformed (at the first byte that cannot belong to a request head, not at a timeout),
// 413 body too large, 431 head or trailers too large, 501 a transfer coding other than chunked.
#pragma once

#include <utility>  // before Boost 1.74 Asio, whose awaitable.hpp uses std::exchange without it

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <memory>
#include <optional>
#include <string>

#include "server/http_head_scan.h"

namespace moeserve::server {

namespace http = boost::beast::http;
using HttpRequest = http::request<http::string_body>;

struct HttpLimits {
  // The request line and header fields together (431 above). Also the most a chunked body's framing may hold
  // unparsed at once: one chunk-size line with its extensions, or the whole trailer section.
  size_t max_header_bytes = 64 << 10;
  size_t max_header_fields = 100;  // header fields, and separately trailer fields (431 above)
  size_t max_body_bytes = 8 << 20;  // declared by Content-Length or summed over chunks (413 above)
};

struct HttpFailure {
  unsigned status = 0;
  std::string message;  // what was wrong, naming the limit or the byte
};

class HttpRequestReader {
 public:
  enum class Progress {
    need_more,    // give it more bytes (prepare, read, commit), then parse again
    header_done,  // the head is complete and the body is not (once per request: time for 100 Continue)
    complete,     // request() is the whole request
    failed,       // failure() says why; the connection cannot be read further
  };

  explicit HttpRequestReader(HttpLimits limits);
  ~HttpRequestReader();

  // Begins the next request. Bytes received after the previous one (a pipelined request) are kept.
  void next_request();
  // Room for the client's next bytes, never empty while parse() says need_more; commit(n) after n arrived.
  boost::asio::mutable_buffer prepare();
  void commit(size_t n) { buffer_.commit(n); }
  Progress parse();

  // Whether any byte of this request has arrived (empty lines before a request line do not count, RFC 9112 §2.2).
  bool started() const;
  // Whether body bytes have arrived already (a client that sent them needs no 100 Continue).
  bool body_started() const;
  // The head after header_done, the whole request after complete.
  const HttpRequest& request() const;
  HttpRequest release();
  const HttpFailure& failure() const { return failure_; }
  size_t buffered() const { return buffer_.size(); }

 private:
  class Parser;
  Progress fail(unsigned status, std::string message);
  Progress fail(const boost::system::error_code& ec);
  Progress need_more();
  Progress header_too_large();
  bool scan_head();
  bool skip_empty_lines();

  HttpLimits limits_;
  boost::beast::flat_buffer buffer_;
  std::unique_ptr<Parser> parser_;
  RequestHeadScan scan_;
  size_t scanned_ = 0;  // bytes at the front of buffer_ the head scan has examined
  bool header_reported_ = false;
  HttpFailure failure_;
};

}  // namespace moeserve::server
