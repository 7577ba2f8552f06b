#include "bench/http_failure.h"

#include <fmt/format.h>

#include <boost/beast/http/status.hpp>

namespace moeserve::bench {
namespace {

// The server's error body is kept short: one line, enough for its message.
constexpr size_t kBodyShown = 300;

std::string one_line(std::string_view body) {
  std::string out(body.substr(0, kBodyShown));
  for (char& c : out)
    if (c == '\n' || c == '\r') c = ' ';
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (body.size() > kBodyShown) out += "...";
  return out;
}

std::string advice(int status, const HttpStatusContext& c) {
  // OpenAI and vLLM answer a missing or wrong key with 401; some proxies use 403.
  if (status == 401 || status == 403)
    return c.api_key_given ? "the server refused the API key (--api-key or OPENAI_API_KEY)"
                           : "pass --api-key or set OPENAI_API_KEY";
  if (status == 404)
    return c.api == HttpApi::sglang
               ? "is this an SGLang server? try --api openai"
               : "is this an OpenAI-compatible server? try --api sglang for SGLang's native API, or check the "
                 "--endpoint path";
  return "";
}

}  // namespace

std::string connect_failure_text(const HttpEndpoint& e, ConnectFailure kind, std::string_view detail) {
  switch (kind) {
    case ConnectFailure::refused:
      return fmt::format("connection refused at {}:{}: is the server running?", e.host, e.port);
    case ConnectFailure::timed_out:
      return fmt::format("no answer from {}:{} ({}): is the host reachable?", e.host, e.port, detail);
    case ConnectFailure::other:
      break;
  }
  return fmt::format("cannot connect to {}:{}: {}", e.host, e.port, detail);
}

std::string http_status_text(int status, const HttpStatusContext& context, std::string_view body) {
  const auto reason = boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(status));
  std::string text = fmt::format("HTTP {} {} on {}", status, std::string_view(reason.data(), reason.size()),
                                 context.path);
  const std::string what = advice(status, context);
  if (!what.empty()) text += ": " + what;
  const std::string said = one_line(body);
  if (!said.empty()) text += what.empty() ? ": " + said : " (the server said: " + said + ")";
  return text;
}

}  // namespace moeserve::bench
