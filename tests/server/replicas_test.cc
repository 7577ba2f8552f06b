// Data-parallel replicas: two `moeserve serve` processes of the tiny model behind HAProxy, configured by the
// template users copy (deploy/haproxy/moeserve.cfg, its three addresses replaced by free loopback ports). Requests
// through the proxy reach both replicas and streams pass through as they are generated; a replica killed mid-run
// loses only its in-flight requests (a JSON 502 or a stream cut short, never a hang) while the other's finish and
// new requests all succeed; `moeserve bench --endpoint` at the proxy gives a VALID run; and
// scripts/serve_replicas.sh starts the whole set and stops every process of it on SIGTERM.
// Needs Debian's haproxy package, which scripts/setup.sh installs.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "server/server_harness.h"
#include "test_util.h"
#include "util/files.h"

namespace moeserve {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

constexpr auto kReadTimeout = 60s;  // the longest a read through the proxy waits before the test fails

// Where the test finds HAProxy: on PATH, else where Debian's package puts it; empty when it is not installed.
std::string haproxy_binary() {
  std::stringstream path(std::string(getenv("PATH") ? getenv("PATH") : "") + ":/usr/sbin");
  for (std::string dir; std::getline(path, dir, ':');)
    if (!dir.empty() && access((dir + "/haproxy").c_str(), X_OK) == 0) return dir + "/haproxy";
  return {};
}
constexpr const char* kNoHaproxy =
    "haproxy is not installed (neither on PATH nor /usr/sbin/haproxy): scripts/setup.sh installs Debian's package";

tcp::endpoint loopback(uint16_t port) { return {net::ip::make_address("127.0.0.1"), port}; }

// `count` consecutive ports free on the loopback (held while checked, then let go), the first returned.
uint16_t free_ports(int count) {
  net::io_context ioc;
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::vector<tcp::acceptor> held;
    held.emplace_back(ioc, loopback(0));
    const int first = held.front().local_endpoint().port();
    beast::error_code ec;
    for (int i = 1; i < count && !ec && first + i <= 65535; ++i) {
      held.emplace_back(ioc).open(tcp::v4(), ec);
      if (!ec) held.back().bind(loopback(static_cast<uint16_t>(first + i)), ec);
    }
    if (!ec && static_cast<int>(held.size()) == count) return static_cast<uint16_t>(first);
  }
  return 0;
}

// Polls `done` every 50 ms for at most `timeout`; whether it came true.
bool eventually(const std::function<bool()>& done, std::chrono::milliseconds timeout = 30s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(50ms);
  }
  return true;
}

// One series of a replica's /metrics (0 when it is not there).
double metric(uint16_t port, const std::string& series) {
  const std::string text = testing::http_request(port, "GET", "/metrics").body;
  const size_t at = text.find("\n" + series + " ");
  return at == std::string::npos ? 0 : std::stod(text.substr(at + series.size() + 2));
}
const std::string kCompletionsServed = "moeserve_http_requests_total{route=\"/v1/completions\",status=\"200\"}";
const std::string kRunning = "moeserve_num_requests_running";

// A completion of exactly `tokens` tokens (greedy; the tiny model's random weights rarely stop, ignore_eos makes
// sure), streamed with its usage chunk or not.
json completion(int tokens, bool stream) {
  json body = {{"model", "tiny"},        {"prompt", {200006, 1428, 200008}}, {"max_tokens", tokens},
               {"ignore_eos", true},     {"temperature", 0}};
  if (stream) {
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
  }
  return body;
}

// One POST /v1/completions through the proxy on a thread of its own, read as the proxy passes it on, so that
// what has come so far can be looked at while it runs. Every read waits at most kReadTimeout.
class ProxiedRequest {
 public:
  struct Outcome {
    unsigned status = 0;  // 0: no response head came
    std::string replica;  // the X-Moeserve-Replica header HAProxy adds
    std::string body;     // de-chunked, as far as it came
    bool whole = false;   // the response came to its end (its last chunk); false when the connection broke off
    beast::error_code error;
  };

  ProxiedRequest(uint16_t port, const json& body) : thread_([this, port, text = body.dump()] { run(port, text); }) {}
  ~ProxiedRequest() {
    if (thread_.joinable()) thread_.join();
  }

  // Waits until the response head and the first server-sent event have come; false when they did not.
  bool wait_for_first_event() {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, kReadTimeout, [&] { return ended_ || outcome_.body.find("data: ") != std::string::npos; });
    return outcome_.body.find("data: ") != std::string::npos;
  }
  std::string replica() {
    std::lock_guard lock(mutex_);
    return outcome_.replica;
  }
  bool ended() {
    std::lock_guard lock(mutex_);
    return ended_;
  }
  // Waits for the end and returns what came.
  Outcome finish() {
    if (thread_.joinable()) thread_.join();
    return outcome_;
  }

 private:
  void run(uint16_t port, const std::string& body) {
    net::io_context ioc;
    beast::tcp_stream stream(ioc);
    beast::error_code ec;
    // Beast's stream timeouts apply to asynchronous operations: each one is run to its end here.
    auto step = [&](auto start) {
      stream.expires_after(kReadTimeout);
      start([&ec](beast::error_code e, size_t) { ec = e; });
      ioc.restart();
      ioc.run();
    };
    http::request<http::string_body> request(http::verb::post, "/v1/completions", 11);
    request.set(http::field::host, "127.0.0.1");
    request.set(http::field::content_type, "application/json");
    request.body() = body;
    request.prepare_payload();
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64u << 20);
    stream.socket().connect(loopback(port), ec);
    if (!ec) step([&](auto done) { http::async_write(stream, request, done); });
    if (!ec) step([&](auto done) { http::async_read_header(stream, buffer, parser, done); });
    if (!ec) {
      std::lock_guard lock(mutex_);
      outcome_.status = parser.get().result_int();
      outcome_.replica = std::string(parser.get()["X-Moeserve-Replica"]);
    }
    while (!ec && !parser.is_done()) {
      step([&](auto done) { http::async_read_some(stream, buffer, parser, done); });
      std::lock_guard lock(mutex_);
      outcome_.body = parser.get().body();
      changed_.notify_all();
    }
    std::lock_guard lock(mutex_);
    outcome_.body = parser.get().body();
    outcome_.whole = !ec && parser.is_done();
    outcome_.error = ec;
    ended_ = true;
    changed_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  Outcome outcome_;
  bool ended_ = false;
  std::thread thread_;  // last: it starts once the rest is built
};

// A stream that came whole: its last event is [DONE] and its usage chunk counts `tokens` completion tokens.
void expect_whole_stream(const ProxiedRequest::Outcome& stream, int tokens) {
  EXPECT_EQ(stream.status, 200u) << stream.body;
  EXPECT_TRUE(stream.whole) << stream.error.message();
  const std::vector<std::string> events = testing::sse_data(stream.body);
  ASSERT_GE(events.size(), 2u) << stream.body;
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(json::parse(events[events.size() - 2])["usage"]["completion_tokens"], tokens);
}

const std::vector<std::string> kReplicaFlags = {"--served-model-name", "tiny", "--threads", "1", "--max-model-len",
                                                "2048", "--kv-cache-size", "64MiB", "--disable-log-stats"};

// Two replicas of the tiny model and HAProxy in front of them, run with deploy/haproxy/moeserve.cfg: its frontend
// and two server addresses replaced, nothing else.
class Replicas : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string haproxy = haproxy_binary();
    ASSERT_FALSE(haproxy.empty()) << kNoHaproxy;
    std::vector<std::string> arguments = {testing::tiny_model()};
    arguments.insert(arguments.end(), kReplicaFlags.begin(), kReplicaFlags.end());
    for (auto& replica : replicas_) {
      replica = std::make_unique<testing::ServeProcess>(arguments);
      ASSERT_NE(replica->port(), 0) << replica->log();
    }
    proxy_port_ = free_ports(1);
    std::string config = read_text_file(std::string(MOESERVE_SOURCE_DIR) + "/deploy/haproxy/moeserve.cfg");
    for (const auto& [from, to] : {std::pair{"127.0.0.1:8000", proxy_port_}, {"127.0.0.1:8001", replicas_[0]->port()},
                                   {"127.0.0.1:8002", replicas_[1]->port()}}) {
      const size_t at = config.find(from);
      ASSERT_NE(at, std::string::npos) << from;
      ASSERT_EQ(config.find(from, at + 1), std::string::npos) << from;
      config.replace(at, std::string(from).size(), fmt::format("127.0.0.1:{}", to));
    }
    const std::string dir = testing::temp_dir("replicas");
    write_text_file(dir + "/haproxy.cfg", config);
    haproxy_ = std::make_unique<testing::ChildProcess>(std::vector<std::string>{haproxy, "-db", "-f", dir + "/haproxy.cfg"},
                                                       dir + "/haproxy.log");
    ASSERT_TRUE(eventually([&] { return !haproxy_->running() || proxy_answers(proxy_port_); })) << haproxy_->log();
    ASSERT_TRUE(haproxy_->running()) << haproxy_->log();
  }

  static bool proxy_answers(uint16_t port) {
    try {
      return testing::http_request(port, "GET", "/v1/models").status == 200;
    } catch (const std::exception&) {  // not listening yet
      return false;
    }
  }
  testing::ServeProcess& replica(const std::string& name) {
    return *replicas_.at(name == "replica1" ? 0 : name == "replica2" ? 1 : replicas_.size());  // throws for others
  }
  bool marked_down(const std::string& name) { return haproxy_->log().find(name + " is DOWN") != std::string::npos; }

  // New requests, sent at once after `gone` stopped taking them, all succeed on `survivor`. `gone` has the fewest
  // connections, so leastconn picks it until its health checks fail: its port refuses the connection (killed) or
  // it answers 503 (draining), and HAProxy retries the request on the survivor.
  void expect_new_requests_go_to(const std::string& survivor, const std::string& gone) {
    const bool down_before = marked_down(gone);
    for (int i = 0; i < 4; ++i) {
      auto r = testing::post_json(proxy_port_, "/v1/completions", completion(4, false));
      EXPECT_EQ(r.status, 200u) << r.body;
      EXPECT_EQ(r.headers["x-moeserve-replica"], survivor);
    }
    if (!down_before) {  // HAProxy's log line counts each request's retries: "+1" when it was redispatched.
      EXPECT_TRUE(std::regex_search(haproxy_->log(), std::regex("replicas/" + survivor + " .*/\\+1 ")))
          << haproxy_->log();
    }
  }

  std::array<std::unique_ptr<testing::ServeProcess>, 2> replicas_;
  std::unique_ptr<testing::ChildProcess> haproxy_;
  uint16_t proxy_port_ = 0;
};

TEST_F(Replicas, RequestsThroughTheProxyReachBothReplicasAndStreamsPassThroughAsGenerated) {
  std::set<std::string> served_by;
  for (int i = 0; i < 4; ++i) {
    auto r = testing::post_json(proxy_port_, "/v1/completions", completion(4, false));
    ASSERT_EQ(r.status, 200u) << r.body;
    served_by.insert(r.headers["x-moeserve-replica"]);
  }
  EXPECT_EQ(served_by, (std::set<std::string>{"replica1", "replica2"}));
  // A replica counts a request once its response is written, which may be just after the client has read it.
  double first = 0, second = 0;
  EXPECT_TRUE(eventually([&] {
    first = metric(replicas_[0]->port(), kCompletionsServed);
    second = metric(replicas_[1]->port(), kCompletionsServed);
    return first + second >= 4;
  }, 10s));
  EXPECT_GE(first, 1);
  EXPECT_GE(second, 1);
  EXPECT_EQ(first + second, 4);

  // The first event reaches the client while its replica is still generating: HAProxy does not buffer the stream.
  ProxiedRequest stream(proxy_port_, completion(300, true));
  ASSERT_TRUE(stream.wait_for_first_event()) << stream.finish().body;
  EXPECT_EQ(metric(replica(stream.replica()).port(), kRunning), 1);
  expect_whole_stream(stream.finish(), 300);
}

TEST_F(Replicas, BenchAtTheProxyGivesAValidRun) {
  const std::string dir = testing::temp_dir("replicas-bench");
  const auto r = testing::run_command(fmt::format(
      "{} bench --endpoint http://127.0.0.1:{} --scenario offline --dataset synthetic --synthetic-samples 16 "
      "--synthetic-input 32 --synthetic-output 16 --min-duration 0 --min-query-count 16 --no-progress "
      "--output-dir {}",
      MOESERVE_BINARY, proxy_port_, dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("Result is : VALID"));
  const json result = json::parse(read_text_file(dir + "/moeserve_result.json"));
  EXPECT_EQ(result["validity"], "VALID") << result["reasons"].dump();
  // Offline issues every query at once: leastconn spreads them over both replicas.
  EXPECT_TRUE(eventually([&] {
    return metric(replicas_[0]->port(), kCompletionsServed) >= 1 && metric(replicas_[1]->port(), kCompletionsServed) >= 1;
  }, 10s));
}

TEST_F(Replicas, AKilledReplicaLosesOnlyItsInFlightRequestsAndNewOnesGoToTheOther) {
  constexpr int kTokens = 300;
  // Two streams; leastconn sends the second to the replica the first is not on. The first one's replica dies.
  ProxiedRequest doomed_stream(proxy_port_, completion(kTokens, true));
  ASSERT_TRUE(doomed_stream.wait_for_first_event()) << doomed_stream.finish().body;
  ProxiedRequest surviving_stream(proxy_port_, completion(kTokens, true));
  ASSERT_TRUE(surviving_stream.wait_for_first_event()) << surviving_stream.finish().body;
  const std::string killed = doomed_stream.replica(), survivor = surviving_stream.replica();
  ASSERT_NE(killed, survivor);
  // Two requests that are not streamed, one after the other is running: one on each replica (leastconn again).
  auto running = [&](const std::string& name) { return metric(replica(name).port(), kRunning); };
  ProxiedRequest whole_a(proxy_port_, completion(kTokens, false));
  ASSERT_TRUE(eventually([&] { return running(killed) + running(survivor) == 3; }));
  ProxiedRequest whole_b(proxy_port_, completion(kTokens, false));
  ASSERT_TRUE(eventually([&] { return running(killed) == 2 && running(survivor) == 2; }));
  ASSERT_FALSE(doomed_stream.ended()) << "the stream ended before its replica was killed";

  const int status = replica(killed).terminate_and_wait(SIGKILL);
  ASSERT_TRUE(WIFSIGNALED(status));
  expect_new_requests_go_to(survivor, killed);

  // In flight on the dead replica: the stream breaks off before its [DONE]; the other request gets HAProxy's 502
  // in OpenAI's error shape. In flight on the survivor: both complete.
  const auto cut = doomed_stream.finish();
  EXPECT_EQ(cut.replica, killed);
  EXPECT_FALSE(cut.whole);
  EXPECT_NE(cut.error, beast::error::timeout);
  EXPECT_THAT(cut.body, Not(HasSubstr("[DONE]")));
  expect_whole_stream(surviving_stream.finish(), kTokens);
  std::array<ProxiedRequest::Outcome, 2> outcomes = {whole_a.finish(), whole_b.finish()};
  if (outcomes[0].status != 200) std::swap(outcomes[0], outcomes[1]);
  EXPECT_EQ(outcomes[0].status, 200u) << outcomes[0].body;
  EXPECT_EQ(outcomes[0].replica, survivor);
  EXPECT_EQ(json::parse(outcomes[0].body)["usage"]["completion_tokens"], kTokens);
  ASSERT_EQ(outcomes[1].status, 502u) << outcomes[1].body;
  EXPECT_THAT(json::parse(outcomes[1].body)["error"]["message"].get<std::string>(), HasSubstr("failed"));

  // The health checks take the dead replica out; requests still succeed.
  EXPECT_TRUE(eventually([&] { return marked_down(killed); })) << haproxy_->log();
  auto after = testing::post_json(proxy_port_, "/v1/completions", completion(4, false));
  EXPECT_EQ(after.status, 200u) << after.body;
  EXPECT_EQ(after.headers["x-moeserve-replica"], survivor);
}

// A rolling restart: SIGTERM on a replica lets its streams finish while new requests go to the other.
TEST_F(Replicas, ASigtermedReplicaFinishesItsStreamsWhileNewRequestsGoToTheOther) {
  constexpr int kTokens = 300;
  // Three streams: one replica gets two, the other one, and that one is stopped (leastconn will pick it next).
  std::array<std::unique_ptr<ProxiedRequest>, 3> streams;
  std::map<std::string, int> streams_on;
  for (auto& stream : streams) {
    stream = std::make_unique<ProxiedRequest>(proxy_port_, completion(kTokens, true));
    ASSERT_TRUE(stream->wait_for_first_event()) << stream->finish().body;
    ++streams_on[stream->replica()];
  }
  ASSERT_EQ(streams_on.size(), 2u);
  const auto [stopped, survivor] = streams_on.begin()->second == 1
                                       ? std::pair{streams_on.begin()->first, streams_on.rbegin()->first}
                                       : std::pair{streams_on.rbegin()->first, streams_on.begin()->first};
  ASSERT_EQ(kill(replica(stopped).pid(), SIGTERM), 0);
  // Draining: the replica still listens, and answers /health (and new requests) with 503.
  EXPECT_TRUE(eventually([&] { return testing::http_request(replica(stopped).port(), "GET", "/health").status == 503; },
                         10s));
  expect_new_requests_go_to(survivor, stopped);
  for (auto& stream : streams) expect_whole_stream(stream->finish(), kTokens);
  const int status = replica(stopped).terminate_and_wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// scripts/serve_replicas.sh as a user runs it: two replicas on consecutive ports and HAProxy on the first. SIGTERM
// lets a stream in flight finish, then every process it started is gone and it exits 0.
TEST(ServeReplicasScript, ServesThroughHaproxyAndStopsEveryProcessOnSigterm) {
  ASSERT_FALSE(haproxy_binary().empty()) << kNoHaproxy;
  const uint16_t port = free_ports(3);
  ASSERT_NE(port, 0);
  const std::string dir = testing::temp_dir("serve-replicas");
  std::vector<std::string> argv = {"/usr/bin/env", std::string("MOESERVE=") + MOESERVE_BINARY,
                                   std::string(MOESERVE_SOURCE_DIR) + "/scripts/serve_replicas.sh",
                                   "--replicas", "2", "--port", std::to_string(port), "--logs", dir,
                                   testing::tiny_model()};
  argv.insert(argv.end(), kReplicaFlags.begin(), kReplicaFlags.end());
  testing::ChildProcess launcher(argv, dir + "/launcher.log");
  ASSERT_TRUE(eventually([&] {
    try {
      return !launcher.running() || testing::http_request(port, "GET", "/v1/models").status == 200;
    } catch (const std::exception&) {
      return false;
    }
  })) << launcher.log();
  ASSERT_TRUE(launcher.running()) << launcher.log();
  std::set<std::string> served_by;
  for (int i = 0; i < 2; ++i) served_by.insert(testing::post_json(port, "/v1/completions", completion(4, false))
                                                   .headers["x-moeserve-replica"]);
  EXPECT_EQ(served_by, (std::set<std::string>{"replica1", "replica2"}));

  ProxiedRequest stream(port, completion(300, true));
  ASSERT_TRUE(stream.wait_for_first_event()) << launcher.log();
  const auto status = launcher.signal_and_wait(SIGTERM, 60s);
  ASSERT_TRUE(status.has_value()) << launcher.log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status << "\n" << launcher.log();
  expect_whole_stream(stream.finish(), 300);
  // The pids it printed: two replicas and HAProxy, all gone.
  const std::string log = launcher.log();
  const std::regex pid_line(" pid (\\d+) ");
  std::vector<pid_t> pids;
  for (std::sregex_iterator it(log.begin(), log.end(), pid_line), end; it != end; ++it)
    pids.push_back(std::stoi((*it)[1]));
  EXPECT_EQ(pids.size(), 3u) << log;
  for (pid_t pid : pids) EXPECT_NE(kill(pid, 0), 0) << "pid " << pid << " still runs\n" << log;
}

}  // namespace
}  // namespace moeserve
