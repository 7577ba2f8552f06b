// Issue 14: an exception escaping a handler reached std::terminate. Now any exception from a handler becomes a 500
// in OpenAI's error shape (or, once a stream has begun, an error event that ends the stream cleanly), a handler
// that lets its channel go unanswered gets a 500 too, and the same connection goes on to its next request.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/http_server.h"
#include "server/raw_connection.h"
#include "server/tiny_server.h"

namespace moeserve {
namespace {

using nlohmann::json;
using server::HttpRequest;
using server::ResponseChannel;
using testing::RawConnection;
using testing::request_bytes;

void misbehaving_handler(HttpRequest request, std::shared_ptr<ResponseChannel> channel) {
  const std::string target(request.target());
  if (target == "/throw") throw std::runtime_error("boom");
  if (target == "/type-error") (void)json(5).get<std::string>();  // nlohmann::json::type_error, as in issue 14
  if (target == "/throw-int") throw 42;
  if (target == "/drop") return;
  if (target == "/respond-then-throw") {
    channel->respond(200, "text/plain", "fine");
    throw std::runtime_error("after the answer");
  }
  if (target == "/stream-then-throw") {
    channel->start_events();
    channel->event("one");
    throw std::logic_error("mid-stream");
  }
  channel->respond(200, "application/json", R"({"status":"ok"})");
}

struct MisbehavingServer {
  server::HttpServer http{server::HttpServerOptions{.port = 0}, misbehaving_handler};
  MisbehavingServer() { http.start(); }
};

void expect_ok(RawConnection& c) {
  c.send(request_bytes("GET", "/ok"));
  const auto r = c.read_response();
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, R"({"status":"ok"})");
}

TEST(HttpHandlerFaults, AnExceptionBecomesA500AndTheConnectionServesOn) {
  MisbehavingServer s;
  RawConnection c(s.http.port());
  const std::pair<const char*, const char*> cases[] = {
      {"/throw", "the request handler threw: boom"},
      {"/type-error", "type_error"},
      {"/throw-int", "non-standard exception"},
      {"/drop", "finished without a complete response"},
  };
  for (const auto& [target, fragment] : cases) {
    SCOPED_TRACE(target);
    c.send(request_bytes("GET", target));
    const auto r = c.read_response();
    testing::expect_api_error(r, 500, fragment);
    EXPECT_EQ(json::parse(r.body)["error"]["type"], "server_error");
    EXPECT_EQ(r.headers.at("connection"), "keep-alive");
    expect_ok(c);
  }
}

TEST(HttpHandlerFaults, AnExceptionAfterTheAnswerLeavesTheAnswer) {
  MisbehavingServer s;
  RawConnection c(s.http.port());
  c.send(request_bytes("GET", "/respond-then-throw"));
  const auto r = c.read_response();
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, "fine");
  expect_ok(c);
}

TEST(HttpHandlerFaults, AnExceptionMidStreamEndsTheStreamWithAnErrorEvent) {
  MisbehavingServer s;
  RawConnection c(s.http.port());
  c.send(request_bytes("GET", "/stream-then-throw"));
  const auto r = c.read_response();  // a whole chunked body: the stream was ended, not cut
  ASSERT_EQ(r.status, 200u);
  const auto events = testing::sse_data(r.body);
  ASSERT_EQ(events.size(), 2u) << r.body;
  EXPECT_EQ(events[0], "one");
  const json error = json::parse(events[1]);
  EXPECT_EQ(error["error"]["type"], "server_error");
  EXPECT_NE(error["error"]["message"].get<std::string>().find("mid-stream"), std::string::npos);
  expect_ok(c);
}

}  // namespace
}  // namespace moeserve
