// A blocking HTTP client for the server tests (Boost.Beast), and helpers to read server-sent events.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace moeserve::testing {

struct HttpResult {
  unsigned status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

HttpResult http_request(uint16_t port, const std::string& method, const std::string& target, const std::string& body = {},
                        const std::map<std::string, std::string>& headers = {});
inline HttpResult post_json(uint16_t port, const std::string& target, const nlohmann::json& body,
                            const std::map<std::string, std::string>& headers = {}) {
  return http_request(port, "POST", target, body.dump(), headers);
}

// The "data:" payloads of an event-stream body, in order.
std::vector<std::string> sse_data(const std::string& body);

// The chat completion chunks of an event stream put together: content, reasoning and the finish reason; `usage`
// gets the usage chunk's usage when there is one.
struct StreamedChat {
  std::string content, reasoning, finish;
  nlohmann::json usage;
  nlohmann::json logprobs = nlohmann::json::array();  // the chunks' logprobs.content entries, in order
};
StreamedChat collect_chat_stream(const std::vector<std::string>& events);

// Sends raw bytes on a fresh connection and returns whatever the server sends back until it closes (or the
// timeout passes).
std::string raw_exchange(uint16_t port, const std::string& bytes, int timeout_ms);

}  // namespace moeserve::testing
