#include "server/raw_connection.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include <functional>

#include "server/http_result.h"

namespace moeserve::testing {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

struct RawConnection::Impl {
  net::io_context ioc;
  beast::tcp_stream stream{ioc};
  beast::flat_buffer buffer;
  std::chrono::milliseconds timeout;

  // Runs one asynchronous operation to its end: Beast's stream timeouts apply to asynchronous operations only.
  beast::error_code run(const std::function<void(std::function<void(beast::error_code, size_t)>)>& start) {
    beast::error_code result;
    stream.expires_after(timeout);
    start([&result](beast::error_code ec, size_t) { result = ec; });
    ioc.restart();
    ioc.run();
    return result;
  }
};

RawConnection::RawConnection(uint16_t port, std::chrono::milliseconds timeout) : impl_(std::make_unique<Impl>()) {
  impl_->timeout = timeout;
  impl_->stream.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
}

RawConnection::~RawConnection() = default;

int RawConnection::native_handle() { return impl_->stream.socket().native_handle(); }

bool RawConnection::send(std::string_view bytes) {
  return !impl_->run(
      [&](auto done) { net::async_write(impl_->stream, net::buffer(bytes.data(), bytes.size()), done); });
}

HttpResult RawConnection::read_response(bool to_head) {
  http::response_parser<http::string_body> parser;
  parser.body_limit(1u << 30);
  parser.skip(to_head);
  const auto ec = impl_->run([&](auto done) { http::async_read(impl_->stream, impl_->buffer, parser, done); });
  return ec ? HttpResult{} : to_http_result(parser.get());
}

std::optional<std::string> RawConnection::read_until_close() {
  std::string received(static_cast<const char*>(impl_->buffer.data().data()), impl_->buffer.size());
  impl_->buffer.consume(impl_->buffer.size());
  char chunk[4096];
  beast::error_code ec;
  while (!ec) {
    size_t got = 0;
    ec = impl_->run([&](auto done) {
      impl_->stream.async_read_some(net::buffer(chunk), [&got, done](beast::error_code e, size_t n) {
        got = n;
        done(e, n);
      });
    });
    received.append(chunk, got);
  }
  if (ec != net::error::eof && ec != net::error::connection_reset) return std::nullopt;
  return received;
}

std::string request_bytes(const std::string& method, const std::string& target, const std::string& body,
                          const std::string& extra_headers) {
  std::string head = fmt::format("{} {} HTTP/1.1\r\nHost: 127.0.0.1\r\n{}", method, target, extra_headers);
  if (!body.empty()) head += fmt::format("Content-Type: application/json\r\nContent-Length: {}\r\n", body.size());
  return head + "\r\n" + body;
}

}  // namespace moeserve::testing
