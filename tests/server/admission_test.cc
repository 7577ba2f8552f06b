// Concurrency of the server: --max-in-flight counts prompts, rendering runs off the I/O threads (/health answers
// while requests render), SIGTERM with a drain timeout exits while heavy requests are in flight, and unseeded
// requests draw fresh seeds while a given seed reproduces.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <boost/asio.hpp>
#include <condition_variable>
#include <thread>

#include "server/scripted_runner.h"
#include "server/server_harness.h"
#include "test_util.h"

namespace moeserve {
namespace {

using nlohmann::json;
using testing::expect_error;
using testing::post_json;
using testing::ServerHarness;

// A streaming completion held open on a raw socket: admitted (its first bytes arrived) until closed.
class HeldStream {
 public:
  HeldStream(uint16_t port, const json& body) : socket_(ioc_) {
    socket_.connect({boost::asio::ip::make_address("127.0.0.1"), port});
    const std::string text = body.dump();
    const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                "Content-Length: " + std::to_string(text.size()) + "\r\n\r\n" + text;
    boost::asio::write(socket_, boost::asio::buffer(request));
    char buffer[512];
    const size_t n = socket_.read_some(boost::asio::buffer(buffer));
    head_.assign(buffer, n);
  }
  const std::string& head() const { return head_; }

 private:
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::socket socket_;
  std::string head_;
};

void wait_until_idle(const ServerHarness& h) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (h.engine->in_flight() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(h.engine->in_flight(), 0);
}

json prompts(int n, int max_tokens) {
  json list = json::array();
  for (int i = 0; i < n; ++i) list.push_back({1, 2, 3 + i});
  return {{"model", "tiny"}, {"prompt", list}, {"max_tokens", max_tokens}, {"ignore_eos", true}};
}

TEST(Admission, EveryPromptOfACompletionsRequestTakesAPlace) {
  server::ServerOptions options;
  options.max_in_flight = 4;
  ServerHarness h(testing::tiny_runner(), options);
  const auto too_many = post_json(h.port, "/v1/completions", prompts(5, 1));
  expect_error(too_many, 429, "limit of 4 requests in flight");
  EXPECT_EQ(too_many.headers.at("retry-after"), "1");
  const auto four = post_json(h.port, "/v1/completions", prompts(4, 1));
  ASSERT_EQ(four.status, 200u) << four.body;
  EXPECT_EQ(json::parse(four.body)["choices"].size(), 4u);
  {
    json held = prompts(3, 5000);
    held["stream"] = true;
    HeldStream stream(h.port, held);  // three places taken
    ASSERT_NE(stream.head().find("200 OK"), std::string::npos) << stream.head();
    expect_error(post_json(h.port, "/v1/completions", prompts(2, 1)), 429, "limit of 4");
    EXPECT_EQ(post_json(h.port, "/v1/completions", prompts(1, 1)).status, 200u);
  }  // disconnected: its requests are cancelled and free their places
  wait_until_idle(h);
  EXPECT_EQ(post_json(h.port, "/v1/completions", prompts(4, 1)).status, 200u);
}

// A scripted runner whose config() blocks, while the gate is closed, on every thread but the one that built it:
// the render workers read the model's config, so a request stops inside rendering until the test opens the gate.
class GatedRunner : public ModelRunner {
 public:
  GatedRunner() : inner_([](const std::vector<int32_t>&) { return testing::encode("<|channel|>final<|message|>ok<|return|>"); }) {}

  std::string name() const override { return "gated"; }
  const ModelConfig& config() const override {
    std::unique_lock lock(mutex_);
    if (std::this_thread::get_id() != owner_) {
      ++waiting_;
      changed_.notify_all();
      changed_.wait(lock, [&] { return open_; });
      --waiting_;
    }
    return inner_.config();
  }
  size_t kv_block_bytes(int block_size) const override { return inner_.kv_block_bytes(block_size); }
  void allocate_kv_cache(const KvCacheLayout& layout) override { inner_.allocate_kv_cache(layout); }
  const KvCacheLayout& kv_cache_layout() const override { return inner_.kv_cache_layout(); }
  void forward(const ForwardBatch& batch, ForwardOutput& output) override { inner_.forward(batch, output); }

  void wait_for_a_render() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return waiting_ > 0; });
  }
  void open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }

 private:
  testing::ScriptedRunner inner_;
  std::thread::id owner_ = std::this_thread::get_id();
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  mutable int waiting_ = 0;
  bool open_ = false;
};

TEST(Admission, HealthAnswersWhileRequestsRender) {
  auto runner = std::make_shared<GatedRunner>();
  server::ServerOptions options;
  options.http.io_threads = 1;
  options.render_threads = 1;
  ServerHarness h(runner, options);
  std::vector<testing::HttpResult> results(3);
  std::vector<std::thread> clients;
  for (auto& result : results)
    clients.emplace_back([&] {
      result = post_json(h.port, "/v1/chat/completions", {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
    });
  runner->wait_for_a_render();  // a request is stuck rendering, the others wait for the worker
  // The one I/O thread is free: /health and /v1/models answer (a server rendering on its I/O thread would not
  // answer at all, and raw_exchange would give up after its timeout).
  EXPECT_NE(testing::raw_exchange(h.port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 60'000).find("200 OK"),
            std::string::npos);
  EXPECT_NE(testing::raw_exchange(h.port, "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 60'000)
                .find("200 OK"),
            std::string::npos);
  runner->open();
  for (auto& c : clients) c.join();
  for (const auto& r : results) {
    ASSERT_EQ(r.status, 200u) << r.body;
    EXPECT_EQ(json::parse(r.body)["choices"][0]["message"]["content"], "ok");
  }
}

// `moeserve serve --drain-timeout 2`, SIGTERM while a long generation runs and heavy bodies (megabytes of text,
// thousand-deep schemas) are arriving and rendering: the process drains, cancels and exits 0 (the test's timeout
// is the bound; before, the I/O threads kept rendering past the drain).
TEST(ServeCommand, SigtermWithHeavyRequestsInFlightExitsAfterTheDrainTimeout) {
  const std::string dir = testing::temp_dir("serve_heavy");
  auto made = testing::run_command(std::string(MOESERVE_BINARY) + " make-tiny --out " + dir + "/model");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  testing::ServeProcess serve({"--model", dir + "/model", "--threads", "1", "--drain-timeout", "2", "--max-body", "64MiB",
                               "--render-threads", "2", "--seed", "5"});
  ASSERT_NE(serve.port(), 0u) << serve.log();
  EXPECT_NE(serve.log().find("requests without a seed draw from --seed 5"), std::string::npos) << serve.log();
  std::vector<std::thread> clients;
  clients.emplace_back([&] {
    post_json(serve.port(), "/v1/completions",
              {{"model", "model"}, {"prompt", {1, 2, 3}}, {"max_tokens", 50000}, {"ignore_eos", true}});
  });
  std::string schema = "{}";
  for (int i = 0; i < 2000; ++i) schema = R"({"type":"object","properties":{"p":)" + schema + "}}";
  const std::string text(6 << 20, 'a');
  for (int i = 0; i < 3; ++i)
    clients.emplace_back([&, i] {
      if (i == 0)
        testing::http_request(serve.port(), "POST", "/v1/chat/completions",
                              R"({"model":"model","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function",)"
                              R"("function":{"name":"f","parameters":)" + schema + "}}]}");
      else
        post_json(serve.port(), "/v1/chat/completions",
                  {{"model", "model"}, {"messages", {{{"role", "user"}, {"content", text}}}}, {"max_tokens", 4}});
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // let them arrive; nothing depends on how far
  const int status = serve.terminate_and_wait();
  for (auto& c : clients) c.join();
  ASSERT_TRUE(WIFEXITED(status)) << serve.log();
  EXPECT_EQ(WEXITSTATUS(status), 0) << serve.log();
}

json sampled(int64_t max_tokens) {
  return {{"model", "tiny"}, {"prompt", {200006, 1428, 200008, 17}}, {"max_tokens", max_tokens}, {"temperature", 1.0},
          {"ignore_eos", true}};
}

std::vector<int32_t> token_ids(uint16_t port, const json& body) {
  const auto r = post_json(port, "/v1/completions", body);
  EXPECT_EQ(r.status, 200u) << r.body;
  return json::parse(r.body)["choices"][0]["token_ids"].get<std::vector<int32_t>>();
}

TEST(Seeds, UnseededRequestsDifferWhileAGivenSeedReproduces) {
  server::ServerOptions options;
  options.seed = 20240611;
  std::vector<int32_t> first_unseeded;
  {
    ServerHarness h(testing::tiny_runner(), options);
    first_unseeded = token_ids(h.port, sampled(8));
    EXPECT_NE(token_ids(h.port, sampled(8)), first_unseeded);  // the next draw
    json seeded = sampled(8);
    seeded["seed"] = 5;
    const auto once = token_ids(h.port, seeded);
    EXPECT_EQ(token_ids(h.port, seeded), once);
    EXPECT_NE(once, first_unseeded);
  }
  // The same --seed replays the same draws in the same order; another one does not.
  ServerHarness same(testing::tiny_runner(), options);
  EXPECT_EQ(token_ids(same.port, sampled(8)), first_unseeded);
  options.seed = 7;
  ServerHarness other(testing::tiny_runner(), options);
  EXPECT_NE(token_ids(other.port, sampled(8)), first_unseeded);
}

}  // namespace
}  // namespace moeserve
