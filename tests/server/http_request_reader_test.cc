// The request reader alone, fed bytes in every split a socket could deliver them in: requests come out whole and
// in order, and each limit gives its status with a message naming it, before the offending bytes are buffered.
#include <gtest/gtest.h>

#include <cstring>

#include "server/http_head_scan.h"
#include "server/http_request_reader.h"

namespace moeserve::server {
namespace {

struct Outcome {
  std::vector<HttpRequest> requests;
  std::optional<HttpFailure> failure;
  size_t fed = 0;            // bytes given to the reader before it finished or failed
  size_t most_buffered = 0;  // the largest number of bytes it held unparsed
};

// Feeds `bytes` `piece` bytes at a time, as reads from a socket would, parsing after each.
Outcome read_requests(std::string_view bytes, size_t piece = SIZE_MAX, HttpLimits limits = {}) {
  HttpRequestReader reader(limits);
  Outcome out;
  while (true) {
    const auto progress = reader.parse();
    out.most_buffered = std::max(out.most_buffered, reader.buffered());
    if (progress == HttpRequestReader::Progress::complete) {
      out.requests.push_back(reader.release());
      reader.next_request();
    } else if (progress == HttpRequestReader::Progress::failed) {
      out.failure = reader.failure();
      return out;
    } else if (progress == HttpRequestReader::Progress::need_more) {
      if (out.fed == bytes.size()) return out;
      const auto room = reader.prepare();
      EXPECT_GT(room.size(), 0u) << "need_more with no room to read into";
      const size_t n = std::min({piece, room.size(), bytes.size() - out.fed});
      std::memcpy(room.data(), bytes.data() + out.fed, n);
      reader.commit(n);
      out.fed += n;
    }
  }
}

void expect_failure(const Outcome& out, unsigned status, const std::string& fragment) {
  ASSERT_TRUE(out.failure.has_value()) << "no failure";
  EXPECT_EQ(out.failure->status, status) << out.failure->message;
  EXPECT_NE(out.failure->message.find(fragment), std::string::npos) << out.failure->message;
}

TEST(HttpRequestReader, PipelinedRequestsComeOutWholeInEverySplit) {
  const std::string bytes =
      "\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n"
      "POST /b HTTP/1.1\r\nContent-Length: 3\r\nX-Folded: one\r\n two\r\n\r\nabc"
      "POST /c HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\nwxyz\r\n2\r\n!!\r\n0\r\nX-Trailer: t\r\n\r\n"
      "PURGE /d HTTP/1.1\r\n\r\n";
  for (size_t piece : {size_t(1), size_t(2), size_t(3), size_t(7), size_t(64), SIZE_MAX}) {
    SCOPED_TRACE(piece);
    const Outcome out = read_requests(bytes, piece);
    ASSERT_FALSE(out.failure) << out.failure->message;
    ASSERT_EQ(out.requests.size(), 4u);
    EXPECT_EQ(out.requests[0].target(), "/a");
    EXPECT_EQ(out.requests[0][http::field::host], "x");
    EXPECT_EQ(out.requests[1].body(), "abc");
    EXPECT_EQ(out.requests[1]["X-Folded"], "one two");
    EXPECT_EQ(out.requests[2].body(), "wxyz!!");
    EXPECT_EQ(out.requests[2].version(), 10);
    EXPECT_EQ(out.requests[2].count("X-Trailer"), 0u);  // trailers are not merged into the header section
    EXPECT_EQ(out.requests[3].method_string(), "PURGE");
  }
}

TEST(HttpRequestReader, HeaderDoneComesOnceBeforeTheBody) {
  HttpRequestReader reader({});
  const std::string head = "POST /v1/completions HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
  auto room = reader.prepare();
  std::memcpy(room.data(), head.data(), head.size());
  reader.commit(head.size());
  EXPECT_EQ(reader.parse(), HttpRequestReader::Progress::header_done);
  EXPECT_FALSE(reader.body_started());
  EXPECT_EQ(reader.request()[http::field::expect], "100-continue");
  EXPECT_EQ(reader.parse(), HttpRequestReader::Progress::need_more);
  room = reader.prepare();
  std::memcpy(room.data(), "{}", 2);
  reader.commit(2);
  EXPECT_EQ(reader.parse(), HttpRequestReader::Progress::complete);
  EXPECT_EQ(reader.release().body(), "{}");
}

TEST(HttpRequestReader, JunkIsRefusedAtItsFirstByteEvenAfterAPlausibleStart) {
  std::string junk(4096, '\0');
  for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>((i * 7919 + 13) % 251);
  expect_failure(read_requests(junk), 400, "not an HTTP/1.1 request");
  expect_failure(read_requests("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"), 400, "byte 0x16 at offset 0");
  // Beast alone waits for the blank line once a read ended inside a plausible request line: the scan does not.
  const Outcome out = read_requests("GET /abc" + junk, 8);
  expect_failure(out, 400, "at offset 8");
  EXPECT_EQ(out.fed, 16u);
  expect_failure(read_requests("GET / HTTP/1.1\r\nHost: a\x01\r\n\r\n"), 400, "field value");
  expect_failure(read_requests("GET / HTTP/1.1\r\n Folded: first\r\n\r\n"), 400, "field name");
  expect_failure(read_requests("GET / HTTP/1.1\r\nName : v\r\n\r\n"), 400, "colon");
  expect_failure(read_requests("GET / HTTP/9\r\n\r\n"), 400, "HTTP version");
  // Found by fuzz/http_request_fuzz: Beast takes 1.0 and 1.1 only, so the scan does (HTTP/2's preface included).
  const Outcome preface = read_requests("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 3);
  expect_failure(preface, 400, "HTTP/1.0 or HTTP/1.1");
  EXPECT_EQ(preface.fed, 12u);
}

TEST(HttpRequestReader, HeadOverItsLimitsIs431AndNeverBufferedPastThem) {
  HttpLimits limits;
  limits.max_header_bytes = 1024;
  limits.max_header_fields = 10;
  const std::string big = "GET / HTTP/1.1\r\nX-Big: " + std::string(5000, 'a') + "\r\n\r\n";
  for (size_t piece : {size_t(1), size_t(100), SIZE_MAX}) {
    const Outcome out = read_requests(big, piece, limits);
    expect_failure(out, 431, "exceed 1024 bytes");
    EXPECT_LE(out.most_buffered, 1024u);
  }
  // Found by fuzz/http_request_fuzz: Beast bounds only what it holds unparsed, and it takes complete field lines
  // out of the buffer, so a head arriving in pieces could grow past the limit line by line.
  std::string lines = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 8; ++i) lines += "X-" + std::to_string(i) + ": " + std::string(150, 'v') + "\r\n";
  for (size_t piece : {size_t(100), SIZE_MAX})
    expect_failure(read_requests(lines + "\r\n", piece, limits), 431, "exceed");
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 11; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  expect_failure(read_requests(many + "\r\n", SIZE_MAX, limits), 431, "more than 10 header fields");
  // Beast keeps a field's value in 16 bits: a longer one is a 431 however large the head limit, not an exception.
  limits.max_header_bytes = 1 << 20;
  const std::string huge_field = "GET / HTTP/1.1\r\nX-Huge: " + std::string(70000, 'b') + "\r\n\r\n";
  expect_failure(read_requests(huge_field, SIZE_MAX, limits), 431, "longer than 65533 bytes");
}

std::string chunked(const std::string& chunks) {
  return "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks;
}

TEST(HttpRequestReader, TrailerOverItsLimitsIs431) {
  // Issue 14: a 100 KB trailer aborted the server (Beast throws std::length_error storing it).
  const Outcome crash = read_requests(chunked("2\r\n{}\r\n0\r\nX-T: " + std::string(100000, 'a') + "\r\n\r\n"));
  expect_failure(crash, 431, "trailer section exceeds 65536 bytes");
  EXPECT_LE(crash.most_buffered, 65536u);
  HttpLimits limits;
  limits.max_header_fields = 3;
  std::string trailer;
  for (int i = 0; i < 4; ++i) trailer += "T" + std::to_string(i) + ": v\r\n";
  expect_failure(read_requests(chunked("0\r\n" + trailer + "\r\n"), SIZE_MAX, limits), 431,
                 "more than 3 trailer fields");
  limits.max_header_bytes = 512;
  expect_failure(read_requests(chunked("1;" + std::string(1000, 'e') + "\r\n"), 64, limits), 400,
                 "chunk-size line exceeds 512 bytes");
}

TEST(HttpRequestReader, UnterminatedChunkExtensionIs400InEverySplit) {
  // Found by fuzz/http_request_fuzz: Beast 1.74 waits for more after such a line and charges the chunk to the body
  // limit again at every retry, so a line that arrived in pieces became a 413 (or waited for the timeout).
  const std::string body = chunked("5;name=\"open\r\nhello\r\n0\r\n\r\n");
  for (size_t piece : {size_t(1), size_t(3), SIZE_MAX}) {
    SCOPED_TRACE(piece);
    expect_failure(read_requests(body, piece), 400, "bad chunk extension");
  }
}

TEST(HttpRequestReader, BodyOverTheLimitIs413BeforeItIsBuffered) {
  HttpLimits limits;
  limits.max_body_bytes = 1000;
  const std::string declared = "POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n";
  const Outcome by_length = read_requests(declared + std::string(1001, 'x'), SIZE_MAX, limits);
  expect_failure(by_length, 413, "over 1000 bytes");
  // A chunked body is refused at the chunk that crosses the limit, as soon as its size line arrives.
  const std::string first = chunked("258\r\n" + std::string(600, 'y') + "\r\n");
  const std::string second = "258\r\n";
  const Outcome by_chunks =
      read_requests(first + second + std::string(600, 'z') + "\r\n0\r\n\r\n", 256, limits);
  expect_failure(by_chunks, 413, "request body too large");
  EXPECT_LE(by_chunks.fed, first.size() + 256);
}

TEST(HttpRequestReader, TransferCodingsOtherThanChunkedAreRefused) {
  expect_failure(read_requests("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nxyz"), 400,
                 "does not end with chunked");
  expect_failure(read_requests("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"), 501, "gzip");
  expect_failure(read_requests("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"), 400,
                 "malformed");
}

TEST(RequestHeadScan, AcceptsWhatBeastAcceptsByteByByte) {
  const std::string head = "POST /v1/x?q=%20 HTTP/1.1\r\nHost: a\r\nX: \t v\xc3\xa9\r\n cont\r\n\r\nbody";
  RequestHeadScan scan;
  size_t taken = 0;
  for (char c : head) taken += scan.scan(std::string_view(&c, 1));
  EXPECT_TRUE(scan.done());
  EXPECT_FALSE(scan.invalid());
  EXPECT_EQ(taken, head.size() - 4);  // the body is not the head's
}

}  // namespace
}  // namespace moeserve::server
