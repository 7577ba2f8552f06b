#include "server/http_client.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>

#include "server/http_result.h"

namespace moeserve::testing {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

HttpResult http_request(uint16_t port, const std::string& method, const std::string& target, const std::string& body,
                        const std::map<std::string, std::string>& headers) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  stream.expires_after(std::chrono::seconds(300));
  http::request<http::string_body> req(http::string_to_verb(method), target, 11);
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::content_type, "application/json");
  for (const auto& [k, v] : headers) req.set(k, v);
  req.body() = body;
  req.prepare_payload();
  http::write(stream, req);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(1u << 30);
  http::read(stream, buffer, parser);
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  return to_http_result(parser.get());
}

std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  return out;
}

std::string raw_exchange(uint16_t port, const std::string& bytes, int timeout_ms) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  stream.expires_after(std::chrono::milliseconds(timeout_ms));
  net::write(stream.socket(), net::buffer(bytes));
  std::string received;
  char chunk[4096];
  beast::error_code ec;
  while (true) {
    const size_t n = stream.read_some(net::buffer(chunk), ec);
    if (ec) break;
    received.append(chunk, n);
  }
  return received;
}

StreamedChat collect_chat_stream(const std::vector<std::string>& events) {
  StreamedChat out;
  for (const std::string& event : events) {
    if (event == "[DONE]") continue;
    const nlohmann::json chunk = nlohmann::json::parse(event);
    if (chunk["choices"].empty()) {
      out.usage = chunk["usage"];
      continue;
    }
    const nlohmann::json& d = chunk["choices"][0]["delta"];
    if (d.contains("content") && d["content"].is_string()) out.content += d["content"].get<std::string>();
    if (d.contains("reasoning_content")) out.reasoning += d["reasoning_content"].get<std::string>();
    if (!chunk["choices"][0]["finish_reason"].is_null()) out.finish = chunk["choices"][0]["finish_reason"];
    if (const nlohmann::json& lp = chunk["choices"][0]["logprobs"]; lp.is_object())
      for (const nlohmann::json& entry : lp["content"]) out.logprobs.push_back(entry);
  }
  return out;
}

}  // namespace moeserve::testing
