// The transport's regression suite for issue 14: each test sends one hostile input to a running server, checks
// the status and the error body it gets (or that the connection is dropped), and then that the same server still
// answers /health and a tiny-model completion exactly.
#include <gtest/gtest.h>

#include <sys/socket.h>

#include <fmt/format.h>

#include <atomic>
#include <thread>

#include "server/raw_connection.h"
#include "server/tiny_server.h"

namespace moeserve {
namespace {

using testing::RawConnection;
using testing::TinyServer;

std::string chunked_head() {
  return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
         "Transfer-Encoding: chunked\r\n\r\n";
}

std::string chunk(const std::string& data) { return fmt::format("{:x}\r\n{}\r\n", data.size(), data); }

void expect_closed(RawConnection& connection) {
  EXPECT_TRUE(connection.read_until_close().has_value()) << "the server kept the connection open";
}

TEST(HttpFaults, TrailerOf100KbIs431) {
  TinyServer s;
  RawConnection c(s.port);
  const std::string trailer = "X-T: " + std::string(100000, 'a') + "\r\n";
  c.send(chunked_head() + chunk(testing::tiny_completion(0, 4, false).dump()) + "0\r\n" + trailer + "\r\n");
  testing::expect_api_error(c.read_response(), 431, "trailer section exceeds 65536 bytes");
  expect_closed(c);
  testing::expect_still_serving(s.port);
}

TEST(HttpFaults, ChunkedRequestWithASmallTrailerIsServed) {
  TinyServer s;
  RawConnection c(s.port);
  c.send(chunked_head() + chunk(testing::tiny_completion(1, 3, false).dump()) + "0\r\nX-Checksum: 1\r\n\r\n");
  const auto r = c.read_response();
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(testing::completion_tokens(r.body, false), testing::tiny_completion_tokens(1, 3));
}

TEST(HttpFaults, BinaryJunkIsAnswered400AtOnce) {
  server::HttpServerOptions http;
  http.request_timeout = std::chrono::minutes(5);  // far past the client's wait: the answer cannot be a timeout's
  TinyServer s(http);
  std::string junk(4096, '\0');
  for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>((i * 7919 + 13) % 251);
  for (const std::string& start : {std::string(), std::string("GET /abc")}) {
    RawConnection c(s.port, std::chrono::seconds(20));
    c.send(start);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the junk comes in a later read
    c.send(junk);
    testing::expect_api_error(c.read_response(), 400, "not an HTTP/1.1 request");
    expect_closed(c);
  }
  testing::expect_still_serving(s.port);
}

TEST(HttpFaults, HeadersOverTheLimitsAre431) {
  TinyServer s;
  {
    RawConnection c(s.port);
    c.send("GET /health HTTP/1.1\r\nX-Big: " + std::string(70000, 'h') + "\r\n\r\n");
    testing::expect_api_error(c.read_response(), 431, "exceed 65536 bytes");
    expect_closed(c);
  }
  {
    RawConnection c(s.port);
    std::string head = "GET /health HTTP/1.1\r\n";
    for (int i = 0; i < 101; ++i) head += fmt::format("X-Field-{}: {}\r\n", i, i);
    c.send(head + "\r\n");
    testing::expect_api_error(c.read_response(), 431, "more than 100 header fields");
    expect_closed(c);
  }
  testing::expect_still_serving(s.port);
}

TEST(HttpFaults, BodyOverMaxBodyIs413BeforeItIsSent) {
  server::HttpServerOptions http;
  http.max_body_bytes = 4096;
  TinyServer s(http);
  {
    // Chunked: refused at the chunk-size line that crosses the limit; the client has not sent that chunk yet.
    RawConnection c(s.port);
    c.send(chunked_head() + chunk(std::string(3000, ' ')) + "1000\r\n");
    testing::expect_api_error(c.read_response(), 413, "over 4096 bytes");
    expect_closed(c);
  }
  {
    // Declared: refused at the head, and with no 100 Continue to a client that waits for one.
    RawConnection c(s.port);
    c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n");
    testing::expect_api_error(c.read_response(), 413, "request body too large");
    expect_closed(c);
  }
  testing::expect_still_serving(s.port);
}

TEST(HttpFaults, IncompleteRequestsGet408AtTheRequestTimeout) {
  server::HttpServerOptions http;
  http.request_timeout = std::chrono::milliseconds(400);
  TinyServer s(http);
  {
    RawConnection c(s.port);
    const std::string body = testing::tiny_completion(0, 4, false).dump();
    c.send(testing::request_bytes("POST", "/v1/completions", body).substr(0, 100 + body.size() / 2));
    testing::expect_api_error(c.read_response(), 408, "did not arrive complete within 400 ms");
    expect_closed(c);
  }
  {
    // A byte every 50 ms for up to 60 s: a deadline that each byte renewed would not pass while the client waits.
    RawConnection c(s.port);
    std::atomic<bool> stop{false};
    std::thread trickle([&] {
      const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + std::string(1200, 'X');
      for (size_t i = 0; i < request.size() && !stop; ++i) {
        if (::send(c.native_handle(), &request[i], 1, MSG_NOSIGNAL) != 1) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
    const auto r = c.read_response();
    stop = true;
    trickle.join();
    testing::expect_api_error(r, 408, "within 400 ms");
  }
  testing::expect_still_serving(s.port);
}

TEST(HttpFaults, IdleConnectionsAreClosedSilently) {
  server::HttpServerOptions http;
  http.idle_timeout = std::chrono::milliseconds(200);
  TinyServer s(http);
  {
    RawConnection c(s.port);  // never sends a byte
    EXPECT_EQ(c.read_until_close(), "");
  }
  {
    RawConnection c(s.port);  // keep-alive after one request
    c.send(testing::request_bytes("GET", "/health"));
    EXPECT_EQ(c.read_response().status, 200u);
    EXPECT_EQ(c.read_until_close(), "");
  }
  testing::expect_still_serving(s.port);
}

TEST(HttpFaults, UnsupportedFramingIsRefused) {
  TinyServer s;
  const std::pair<std::string, std::pair<unsigned, std::string>> cases[] = {
      {"Expect: 200-ok\r\nContent-Length: 2\r\n", {417, "only 100-continue"}},
      {"Transfer-Encoding: gzip\r\n", {400, "does not end with chunked"}},
      {"Transfer-Encoding: gzip, chunked\r\n", {501, "'gzip' is not supported"}},
      {"Content-Length: 2\r\nContent-Length: 3\r\n", {400, "malformed HTTP request"}},
  };
  for (const auto& [headers, expected] : cases) {
    SCOPED_TRACE(headers);
    RawConnection c(s.port);
    c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n{}");
    testing::expect_api_error(c.read_response(), expected.first, expected.second);
    expect_closed(c);
  }
  testing::expect_still_serving(s.port);
}

}  // namespace
}  // namespace moeserve
