// Thousands of hostile connections at once against one server while a few streams run: connections dropped at
// once, after half a request, after trickling bytes, after starting a stream; junk (400); half a request left
// waiting (408); idle ones (closed). Every stream still carries exactly the tokens its request gives alone, every
// hostile connection gets its answer, the engine ends with nothing in flight, and the server's memory returns near
// its level before the storm (the measured figures are printed).
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <boost/asio.hpp>
#include <thread>

#include "server/raw_connection.h"
#include "server/tiny_server.h"

namespace moeserve {
namespace {

namespace net = boost::asio;
using boost::system::error_code;

enum class Abuse { drop, half_then_drop, trickle_then_drop, stream_then_drop, junk, half_then_wait, idle, count };

struct Tally {
  std::array<size_t, static_cast<size_t>(Abuse::count)> done{};
  std::array<size_t, static_cast<size_t>(Abuse::count)> as_expected{};
};

// One hostile connection on the client's io_context; `finished` runs when it is over.
class Abuser : public std::enable_shared_from_this<Abuser> {
 public:
  Abuser(net::io_context& ioc, Abuse kind, Tally& tally, std::function<void()> finished)
      : socket_(ioc), timer_(ioc), kind_(kind), tally_(tally), finished_(std::move(finished)) {}

  void run(uint16_t port) {
    socket_.async_connect({net::ip::make_address("127.0.0.1"), port}, [self = shared_from_this()](error_code ec) {
      if (ec) return self->end(false);
      self->act();
    });
  }

 private:
  void act() {
    static const std::string half = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 400\r\n\r\n{\"mo";
    static const std::string junk = [] {
      std::string j(2048, '\0');
      for (size_t i = 0; i < j.size(); ++i) j[i] = static_cast<char>((i * 131 + 7) % 256);
      return j;
    }();
    static const std::string stream = testing::request_bytes("POST", "/v1/completions",
                                                             testing::tiny_completion(3, 40, true).dump());
    switch (kind_) {
      case Abuse::drop: return end(true);
      case Abuse::half_then_drop: return write(half, [this] { end(true); });
      case Abuse::stream_then_drop: return write(stream, [this] { end(true); });
      case Abuse::trickle_then_drop: return trickle(half.substr(0, 12));
      case Abuse::junk:
      case Abuse::half_then_wait: return write(kind_ == Abuse::junk ? junk : half, [this] { read_until_close(); });
      case Abuse::idle: return read_until_close();
      case Abuse::count: return;
    }
  }

  void write(std::string bytes, std::function<void()> next) {
    out_ = std::move(bytes);
    net::async_write(socket_, net::buffer(out_), [self = shared_from_this(), next](error_code ec, size_t) {
      if (ec) return self->end(false);
      next();
    });
  }

  void trickle(std::string rest) {
    if (rest.empty()) return end(true);
    write(rest.substr(0, 1), [this, rest] {
      timer_.expires_after(std::chrono::milliseconds(40));
      timer_.async_wait([self = shared_from_this(), rest](error_code) { self->trickle(rest.substr(1)); });
    });
  }

  void read_until_close() {
    socket_.async_read_some(net::buffer(chunk_), [self = shared_from_this()](error_code ec, size_t n) {
      self->received_.append(self->chunk_.data(), n);
      if (!ec) return self->read_until_close();
      const std::string& r = self->received_;
      switch (self->kind_) {
        case Abuse::junk: return self->end(r.find(" 400 ") != std::string::npos);
        case Abuse::half_then_wait: return self->end(r.find(" 408 ") != std::string::npos);
        default: return self->end(r.empty());
      }
    });
  }

  void end(bool as_expected) {
    error_code ignored;
    socket_.close(ignored);
    ++tally_.done[static_cast<size_t>(kind_)];
    if (as_expected) ++tally_.as_expected[static_cast<size_t>(kind_)];
    finished_();
  }

  net::ip::tcp::socket socket_;
  net::steady_timer timer_;
  Abuse kind_;
  Tally& tally_;
  std::function<void()> finished_;
  std::array<char, 4096> chunk_{};
  std::string out_;
  std::string received_;
};

// Runs `total` abusers, at most `at_once` open at a time, on one client thread; returns when all are over.
Tally storm(uint16_t port, size_t total, size_t at_once) {
  net::io_context ioc;
  Tally tally;
  size_t started = 0;
  std::function<void()> launch = [&] {
    if (started == total) return;
    const auto kind = static_cast<Abuse>(started++ % static_cast<size_t>(Abuse::count));
    std::make_shared<Abuser>(ioc, kind, tally, [&] { net::post(ioc, launch); })->run(port);
  };
  for (size_t i = 0; i < std::min(total, at_once); ++i) launch();
  ioc.run();
  return tally;
}

// A few streams on threads of their own; each must give exactly the tokens of its request alone.
int streams_gone_wrong(uint16_t port, int count) {
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int i = 0; i < count; ++i)
    threads.emplace_back([&, i] {
      const auto r = testing::post_json(port, "/v1/completions", testing::tiny_completion(i, 32, true));
      const auto events = testing::sse_data(r.body);
      if (r.status != 200 || events.empty() || events.back() != "[DONE]" ||
          testing::completion_tokens(r.body, true) != testing::tiny_completion_tokens(i, 32))
        ++wrong;
    });
  for (auto& t : threads) t.join();
  return wrong;
}

// As many descriptors as the hard limit allows (two a connection: the client's end and the server's).
size_t connections_at_once(size_t wanted) {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = std::min<rlim_t>(limit.rlim_max, 2 * wanted + 512);
  setrlimit(RLIMIT_NOFILE, &limit);
  getrlimit(RLIMIT_NOFILE, &limit);
  return std::min<size_t>(wanted, (limit.rlim_cur - 256) / 2);
}

TEST(HttpStress, ThousandsOfHostileConnectionsWhileStreamsRun) {
  server::HttpServerOptions http;
  http.request_timeout = std::chrono::milliseconds(800);
  http.idle_timeout = std::chrono::milliseconds(800);
  testing::TinyServer s(http);
  for (int i = 0; i < 4; ++i) testing::tiny_completion_tokens(i, 32);  // the references, before any measurement
  const size_t at_once = connections_at_once(2000);

  auto round = [&](size_t connections) {
    Tally tally;
    int wrong = 0;
    std::thread streams([&] { wrong = streams_gone_wrong(s.port, 4); });
    tally = storm(s.port, connections, at_once);
    streams.join();
    EXPECT_EQ(wrong, 0) << "streams that did not carry their tokens exactly";
    for (size_t k = 0; k < static_cast<size_t>(Abuse::count); ++k)
      EXPECT_EQ(tally.as_expected[k], tally.done[k]) << "abuse kind " << k;
  };
  round(200);  // warm-up of the same shape: the engine and the allocator reach their working size
  const auto settle = [&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (s.engine->in_flight() > 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the server's ends see the clients' closes
  };
  settle();
  const size_t idle = testing::resident_bytes();
  round(2000);
  settle();
  const size_t after = testing::resident_bytes();
  std::printf("resident memory: %.1f MiB idle, %.1f MiB after 2000 hostile connections (%zu at once) and 4 streams\n",
              idle / 1048576.0, after / 1048576.0, at_once);
  EXPECT_LT(after, 2 * idle + (32u << 20));
  EXPECT_EQ(s.engine->in_flight(), 0);
  EXPECT_EQ(s.engine->metrics().kv_blocks_in_use, 0);
  testing::expect_still_serving(s.port);
}

}  // namespace
}  // namespace moeserve
