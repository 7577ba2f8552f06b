#include "server/http_request_reader.h"

#include <boost/beast/http/rfc7230.hpp>
#include <fmt/format.h>

#include <limits>
#include <stdexcept>

namespace moeserve::server {

namespace beast = boost::beast;
using boost::system::error_code;

namespace {

// Beast keeps a field's name and value lengths in 16 bits (basic_fields::new_element throws std::length_error
// beyond): checked here, so no client can make it throw.
constexpr size_t kMaxFieldBytes = std::numeric_limits<uint16_t>::max() - 2;
// A read takes at least this much room, so a connection's buffer starts small and grows only for large heads.
constexpr size_t kMinReadBytes = 4096;
constexpr size_t kMaxReadBytes = 64 << 10;

}  // namespace

// Beast's request parser with the server's rules: header and trailer fields counted, trailer fields dropped (RFC
// 9110 §6.5.1: a recipient must not merge them into the header section, and no route reads them), transfer
// codings other than chunked refused. A refusal stops the parse with `refusal` saying why.
class HttpRequestReader::Parser final : public http::basic_parser<true> {
 public:
  explicit Parser(const HttpLimits& limits) : limits_(limits) {
    header_limit(static_cast<uint32_t>(std::min<size_t>(limits.max_header_bytes, UINT32_MAX)));
    body_limit(limits.max_body_bytes);
  }

  HttpRequest request;
  std::optional<HttpFailure> refusal;

  // Whether a chunked body's next bytes are framing (a chunk-size line, or the last chunk and its trailer).
  bool at_chunk_line() const { return chunked() && is_header_done() && !is_done() && chunk_left_ == 0; }

 private:
  void refuse(error_code& ec, unsigned status, std::string message) {
    refusal = HttpFailure{status, std::move(message)};
    ec = http::error::bad_value;  // any error stops the parser; `refusal` carries the real reason
  }

  void on_request_impl(http::verb method, beast::string_view method_string, beast::string_view target, int version,
                       error_code&) override {
    if (method == http::verb::unknown) request.method_string(method_string);
    else request.method(method);
    request.target(target);
    request.version(version);
  }

  void on_response_impl(int, beast::string_view, int, error_code& ec) override { ec = http::error::bad_version; }

  void on_field_impl(http::field name, beast::string_view name_string, beast::string_view value,
                     error_code& ec) override {
    if (is_header_done()) {
      if (++trailer_fields_ > limits_.max_header_fields)
        refuse(ec, 431, fmt::format("request trailer fields too large: more than {} trailer fields (the limit)",
                                    limits_.max_header_fields));
      return;
    }
    if (++header_fields_ > limits_.max_header_fields)
      return refuse(ec, 431, fmt::format("request header fields too large: more than {} header fields (the limit)",
                                         limits_.max_header_fields));
    if (name_string.size() > kMaxFieldBytes || value.size() > kMaxFieldBytes)
      return refuse(ec, 431,
                    fmt::format("request header fields too large: a field is longer than {} bytes", kMaxFieldBytes));
    request.insert(name, name_string, value);
  }

  // RFC 9112 §6.1 and §6.3: a request whose Transfer-Encoding does not end in chunked has no knowable length
  // (400, then close); one with a coding this server cannot decode gets 501.
  void on_header_impl(error_code& ec) override {
    const auto codings = request[http::field::transfer_encoding];
    if (codings.empty()) return;
    if (!chunked())
      return refuse(ec, 400, fmt::format("Transfer-Encoding '{}' does not end with chunked, so the body's length "
                                         "is unknown", std::string(codings)));
    for (const auto& coding : http::token_list(codings))
      if (!beast::iequals(coding, "chunked"))
        return refuse(ec, 501, fmt::format("transfer coding '{}' is not supported (only chunked)",
                                           std::string(coding)));
  }

  void on_body_init_impl(const boost::optional<uint64_t>& content_length, error_code&) override {
    // Beast has already refused a Content-Length over the body limit, so this is bounded.
    if (content_length) request.body().reserve(static_cast<size_t>(*content_length));
  }

  size_t on_body_impl(beast::string_view body, error_code&) override {
    request.body().append(body.data(), body.size());
    return body.size();
  }

  void on_chunk_header_impl(uint64_t size, beast::string_view, error_code&) override { chunk_left_ = size; }

  size_t on_chunk_body_impl(uint64_t remain, beast::string_view body, error_code&) override {
    request.body().append(body.data(), body.size());
    chunk_left_ = remain - body.size();
    return body.size();
  }

  void on_finish_impl(error_code&) override {}

  const HttpLimits& limits_;
  size_t header_fields_ = 0;
  size_t trailer_fields_ = 0;
  uint64_t chunk_left_ = 0;  // data bytes of the current chunk still to come
};

HttpRequestReader::HttpRequestReader(HttpLimits limits) : limits_(limits), buffer_(limits.max_header_bytes) {
  next_request();
}

HttpRequestReader::~HttpRequestReader() = default;

void HttpRequestReader::next_request() {
  parser_ = std::make_unique<Parser>(limits_);
  scan_ = RequestHeadScan{};
  scanned_ = 0;
  header_reported_ = false;
  failure_ = {};
  if (buffer_.size() == 0) buffer_.shrink_to_fit();  // an idle keep-alive connection holds no buffer
}

boost::asio::mutable_buffer HttpRequestReader::prepare() {
  const size_t room = buffer_.max_size() - buffer_.size();
  const size_t spare = buffer_.capacity() - buffer_.size();
  return buffer_.prepare(std::min({room, kMaxReadBytes, std::max(kMinReadBytes, spare)}));
}

bool HttpRequestReader::started() const { return parser_->got_some() || buffer_.size() > 0; }

bool HttpRequestReader::body_started() const { return !parser_->request.body().empty() || buffer_.size() > 0; }

const HttpRequest& HttpRequestReader::request() const { return parser_->request; }

HttpRequest HttpRequestReader::release() { return std::move(parser_->request); }

HttpRequestReader::Progress HttpRequestReader::fail(unsigned status, std::string message) {
  failure_ = HttpFailure{status, std::move(message)};
  return Progress::failed;
}

HttpRequestReader::Progress HttpRequestReader::fail(const error_code& ec) {
  if (parser_->refusal) return fail(parser_->refusal->status, parser_->refusal->message);
  if (ec == http::error::header_limit)
    return header_too_large();
  if (ec == http::error::body_limit)
    return fail(413, fmt::format("request body too large: over {} bytes (the limit, --max-body)",
                                 limits_.max_body_bytes));
  return fail(400, fmt::format("malformed HTTP request: {}", ec.message()));
}

HttpRequestReader::Progress HttpRequestReader::header_too_large() {
  return fail(431, fmt::format("request header fields too large: the request line and headers exceed {} bytes (the "
                               "limit)", limits_.max_header_bytes));
}

// RFC 9112 §2.2: a server should ignore at least one empty line received before the request-line. Returns false
// while a carriage return at the end may yet be one.
bool HttpRequestReader::skip_empty_lines() {
  while (buffer_.size() > 0) {
    const auto* p = static_cast<const char*>(buffer_.data().data());
    if (p[0] == '\n') buffer_.consume(1);
    else if (p[0] == '\r' && buffer_.size() == 1) return false;
    else if (p[0] == '\r' && p[1] == '\n') buffer_.consume(2);
    else break;
  }
  return true;
}

// Examines the head's new bytes, never more than one past the limit, so that where the reads split the bytes
// cannot change which rule a head breaks first. False once the head is refused.
bool HttpRequestReader::scan_head() {
  if (scan_.done()) return true;
  const auto data = buffer_.data();
  const std::string_view bytes(static_cast<const char*>(data.data()), data.size());
  const size_t allowed = limits_.max_header_bytes + 1 - scan_.examined();
  if (scanned_ < bytes.size()) scanned_ += scan_.scan(bytes.substr(scanned_, allowed));
  if (scan_.invalid()) fail(400, scan_.error());
  // Beast bounds only the part of a head it holds unparsed: the whole head is bounded here.
  else if (scan_.examined() > limits_.max_header_bytes) header_too_large();
  return failure_.status == 0;
}

HttpRequestReader::Progress HttpRequestReader::parse() {
  if (failure_.status != 0) return Progress::failed;
  if (!parser_->got_some() && !skip_empty_lines()) return Progress::need_more;
  while (buffer_.size() > 0) {
    if (!parser_->is_header_done()) {
      if (!scan_head()) return Progress::failed;
      // Beast gets a head only whole. Given part of one, it checks the lines there at once, but once a read has
      // ended inside a head it checks the rest only when the head is complete: which rule a head broke first
      // (a malformed Connection list, the size limit) would depend on where the reads split its bytes.
      if (!scan_.done()) break;
    }
    error_code ec;
    size_t used = 0;
    try {
      used = parser_->put(buffer_.data(), ec);
    } catch (const std::length_error& e) {  // Beast's own size checks; the limits above should come first
      return fail(431, fmt::format("request header fields too large ({})", e.what()));
    }
    buffer_.consume(used);
    scanned_ -= std::min(scanned_, used);
    if (ec == http::error::need_more) break;
    if (ec) return fail(ec);
    if (parser_->is_done()) return Progress::complete;
    if (parser_->is_header_done()) {
      parser_->eager(true);  // the body parses in as few calls as the reads allow
      if (!header_reported_) {
        header_reported_ = true;
        return Progress::header_done;
      }
    }
    if (used == 0) break;
  }
  return need_more();
}

// Past the head only chunk framing waits unparsed: a chunk-size line (after the CRLF ending the previous chunk's
// data), or the last chunk ("0", optional extensions) and its trailer section.
HttpRequestReader::Progress HttpRequestReader::need_more() {
  const bool full = buffer_.size() >= buffer_.max_size();
  if (!parser_->is_header_done()) return full ? header_too_large() : Progress::need_more;
  if (!parser_->at_chunk_line())
    return full ? fail(400, fmt::format("request framing exceeds {} bytes", limits_.max_header_bytes))
                : Progress::need_more;
  const auto data = buffer_.data();
  std::string_view pending(static_cast<const char*>(data.data()), data.size());
  if (pending.substr(0, 2) == "\r\n") pending.remove_prefix(2);
  const size_t zeros = pending.find_first_not_of('0');
  const bool last_chunk = zeros != 0 && zeros != std::string_view::npos &&
                          std::string_view("\r; \t").find(pending[zeros]) != std::string_view::npos;
  // Beast 1.74 asks for more bytes after a complete chunk-size line whose extension never ends (an unterminated
  // quoted string), charging the chunk's size to the body limit again at each retry: the line is malformed.
  if (!last_chunk && pending.find("\r\n") != std::string_view::npos)
    return fail(400, "malformed HTTP request: bad chunk extension");
  if (!full) return Progress::need_more;
  if (last_chunk)
    return fail(431, fmt::format("request trailer fields too large: the trailer section exceeds {} bytes (the limit)",
                                 limits_.max_header_bytes));
  return fail(400, fmt::format("a chunk-size line exceeds {} bytes", limits_.max_header_bytes));
}

}  // namespace moeserve::server
