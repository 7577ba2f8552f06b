// HTTP/1.0 and HTTP/1.1 as RFC 9112 and RFC 9110 have them: no chunked coding for a 1.0 client (a stream to it
// ends at close), keep-alive for 1.0 only when asked and the reply has a length, pipelined requests answered in
// order, Expect: 100-continue, HEAD without a body, empty lines before a request line ignored; and the API key
// check with the scheme and the header name in any case.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "server/http_server.h"
#include "server/raw_connection.h"
#include "server/tiny_server.h"

namespace moeserve {
namespace {

using nlohmann::json;
using testing::RawConnection;
using testing::request_bytes;

// Answers /echo with the request body, /stream with three events, anything else with a small JSON body.
void plain_handler(server::HttpRequest request, std::shared_ptr<server::ResponseChannel> channel) {
  const std::string target(request.target());
  if (target == "/stream") {
    channel->start_events();
    for (const char* data : {"a", "b", "c"}) channel->event(data);
    channel->finish_events();
  } else if (target == "/echo") {
    channel->respond(200, "text/plain", request.body());
  } else {
    channel->respond(200, "application/json", R"({"status":"ok"})");
  }
}

struct PlainServer {
  server::HttpServer http{server::HttpServerOptions{.port = 0}, plain_handler};
  PlainServer() { http.start(); }
};

// What arrives until the server closes, split into the head and the body; expects (gtest) the close.
std::pair<std::string, std::string> response_until_close(RawConnection& c) {
  const auto response = c.read_until_close();
  EXPECT_TRUE(response.has_value()) << "the server kept the connection open";
  const std::string all = response.value_or("");
  const size_t end = all.find("\r\n\r\n");
  if (end == std::string::npos) return {all, ""};
  return {all.substr(0, end + 2), all.substr(end + 4)};
}

TEST(HttpConformance, StreamToAnHttp10ClientIsUnchunkedAndEndsAtClose) {
  testing::TinyServer s;
  RawConnection c(s.port);
  const std::string body = testing::tiny_completion(2, 6, true).dump();
  c.send(fmt::format("POST /v1/completions HTTP/1.0\r\nConnection: keep-alive\r\nContent-Type: application/json\r\n"
                     "Content-Length: {}\r\n\r\n{}",
                     body.size(), body));
  const auto [head, events] = response_until_close(c);
  EXPECT_NE(head.find(" 200 "), std::string::npos) << head;
  EXPECT_EQ(head.find("Transfer-Encoding"), std::string::npos) << head;
  EXPECT_NE(head.find("Connection: close\r\n"), std::string::npos) << head;
  EXPECT_EQ(events.substr(0, 6), "data: ");  // the events themselves, no chunk-size line
  EXPECT_EQ(testing::sse_data(events).back(), "[DONE]");
  EXPECT_EQ(testing::completion_tokens(events, true), testing::tiny_completion_tokens(2, 6));
  testing::expect_still_serving(s.port);
}

TEST(HttpConformance, Http10KeepsAliveOnlyWhenAskedAndTheReplyHasALength) {
  PlainServer s;
  {
    RawConnection c(s.http.port());
    c.send("GET /ok HTTP/1.0\r\n\r\n");
    const auto r = c.read_response();
    EXPECT_EQ(r.status, 200u);
    EXPECT_EQ(r.headers.at("connection"), "close");
    EXPECT_TRUE(c.read_until_close().has_value());
  }
  {
    RawConnection c(s.http.port());
    for (int i = 0; i < 2; ++i) {
      c.send("GET /ok HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
      const auto r = c.read_response();
      EXPECT_EQ(r.status, 200u);
      EXPECT_EQ(r.headers.at("connection"), "keep-alive");
      EXPECT_EQ(r.headers.at("content-length"), "15");
    }
    c.send("GET /stream HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");  // no length: the close ends it
    const auto [head, events] = response_until_close(c);
    EXPECT_NE(head.find("Connection: close\r\n"), std::string::npos) << head;
    EXPECT_EQ(events, "data: a\n\ndata: b\n\ndata: c\n\n");
  }
}

TEST(HttpConformance, PipelinedRequestsAreAnsweredInOrder) {
  PlainServer s;
  RawConnection c(s.http.port());
  c.send(request_bytes("POST", "/echo", "first") + request_bytes("GET", "/stream") +
         request_bytes("POST", "/echo", "third") + "\r\n" + request_bytes("GET", "/ok", "", "Connection: close\r\n"));
  EXPECT_EQ(c.read_response().body, "first");
  const auto stream = c.read_response();
  EXPECT_EQ(stream.headers.at("transfer-encoding"), "chunked");
  EXPECT_EQ(testing::sse_data(stream.body), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(c.read_response().body, "third");
  const auto last = c.read_response();
  EXPECT_EQ(last.status, 200u);
  EXPECT_EQ(last.headers.at("connection"), "close");
  EXPECT_TRUE(c.read_until_close().has_value());
}

TEST(HttpConformance, ExpectContinueGets100BeforeTheBody) {
  PlainServer s;
  RawConnection c(s.http.port());
  c.send("POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
  EXPECT_EQ(c.read_response().status, 100u);
  c.send("hello");
  const auto r = c.read_response();
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, "hello");
  // A client that sends its body at once gets no interim response; an HTTP/1.0 client's expectation is ignored.
  c.send("POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi");
  EXPECT_EQ(c.read_response().body, "hi");
  c.send("POST /echo HTTP/1.0\r\nConnection: keep-alive\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nho");
  EXPECT_EQ(c.read_response().body, "ho");
}

TEST(HttpConformance, HeadGetsTheHeadersWithoutTheBody) {
  PlainServer s;
  RawConnection c(s.http.port());
  c.send(request_bytes("HEAD", "/ok") + request_bytes("GET", "/ok"));
  const auto head = c.read_response(true);
  EXPECT_EQ(head.status, 200u);
  EXPECT_EQ(head.headers.at("content-length"), "15");
  EXPECT_EQ(head.body, "");
  EXPECT_EQ(c.read_response().body, R"({"status":"ok"})");  // no stray body bytes before it
}

TEST(HttpConformance, ApiKeyWithTheSchemeAndHeaderNameInAnyCase) {
  server::HttpServerOptions http;
  testing::TinyServer s(http, "sekret");
  for (const char* header : {"Authorization: Bearer sekret", "authorization: bearer sekret",
                             "AUTHORIZATION: BEARER sekret", "Authorization:   Bearer   sekret  "}) {
    RawConnection c(s.port);
    c.send(request_bytes("GET", "/v1/models", "", std::string(header) + "\r\n"));
    EXPECT_EQ(c.read_response().status, 200u) << header;
  }
  for (const char* header : {"Authorization: Bearer sekre", "Authorization: Bearer sekret2",
                             "Authorization: Basic sekret",
                             "Authorization: sekret"}) {
    RawConnection c(s.port);
    c.send(request_bytes("GET", "/v1/models", "", std::string(header) + "\r\n"));
    testing::expect_api_error(c.read_response(), 401, "incorrect API key");
  }
}

}  // namespace
}  // namespace moeserve
