// What `moeserve serve` says while it runs, as an operator reads it: a taken port fails before anything loads; the
// engine's settings in one line; uvicorn-style access lines only when asked for; vLLM's periodic stats line.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <filesystem>
#include <thread>

#include "server/http_client.h"
#include "server/server_harness.h"
#include "test_util.h"

namespace moeserve {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::post_json;

// Waits (bounded) until the server's log holds `text`.
bool log_shows(const testing::ServeProcess& serve, const std::string& text) {
  for (int i = 0; i < 600; ++i) {
    if (serve.log().find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST(ServeLogs, APortInUseFailsBeforeTheModelLoads) {
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::acceptor taken(ioc, {boost::asio::ip::make_address("127.0.0.1"), 0});
  const std::string port = std::to_string(taken.local_endpoint().port());
  const auto result =
      testing::run_command(std::string(MOESERVE_BINARY) + " serve " + testing::tiny_model() + " --port " + port);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_THAT(result.output, HasSubstr(port));
  EXPECT_THAT(result.output, Not(HasSubstr("loading")));
  EXPECT_THAT(result.output, Not(HasSubstr("weights loaded")));
}

TEST(ServeLogs, SettingsLineAccessLinesAndStatsLine) {
  testing::ServeProcess serve({testing::tiny_model(), "--served-model-name", "tiny", "--threads", "1",
                               "--enable-log-requests", "--log-stats-interval", "0.2", "--max-num-seqs", "7"});
  ASSERT_NE(serve.port(), 0) << serve.log();
  auto r = post_json(serve.port(), "/v1/completions", {{"model", "tiny"}, {"prompt", {1, 2, 3}}, {"max_tokens", 4}});
  ASSERT_EQ(r.status, 200u) << r.body;
  const std::string start = serve.log();
  EXPECT_THAT(start, HasSubstr("loading the model (requests get 503 until it is ready)"));
  EXPECT_THAT(start, HasSubstr("weights loaded in"));
  EXPECT_THAT(start, HasSubstr("engine: device cpu, dtype float32, kv-cache-dtype auto, activation-dtype auto, "
                               "tensor-parallel-size 1, max-model-len 131072, "
                               "max-num-seqs 7, max-num-batched-tokens 2048, block-size 16, prefix caching on, "
                               "scheduler fcfs; speculative decoding off"));
  EXPECT_TRUE(log_shows(serve, "\"POST /v1/completions HTTP/1.1\" 200 OK")) << serve.log();
  EXPECT_TRUE(log_shows(serve, "\"GET /health HTTP/1.1\" 200 OK")) << serve.log();
  EXPECT_TRUE(log_shows(serve, "Avg prompt throughput: ")) << serve.log();
  const std::string log = serve.log();
  const size_t stats = log.find("Avg prompt throughput: ");
  const std::string line = log.substr(stats, log.find('\n', stats) - stats);
  for (const char* part : {" tokens/s, Avg generation throughput: ", " tokens/s, Running: ", " reqs, Waiting: ",
                           " reqs, GPU KV cache usage: ", "%, Prefix cache hit rate: "})
    EXPECT_THAT(line, HasSubstr(part));
  EXPECT_THAT(line, Not(HasSubstr("acceptance")));  // not speculating
}

TEST(ServeLogs, TheServedNameIsTheDirectorysEvenWithATrailingSlash) {
  testing::ServeProcess serve({testing::tiny_model() + "/", "--threads", "1", "--disable-log-stats"});
  ASSERT_NE(serve.port(), 0) << serve.log();
  const std::string name = std::filesystem::path(testing::tiny_model()).filename().string();
  auto models = testing::http_request(serve.port(), "GET", "/v1/models/" + name);
  EXPECT_EQ(models.status, 200u) << models.body;
}

TEST(ServeLogs, NoAccessLinesUnlessAskedAndNoStatsWhenDisabled) {
  testing::ServeProcess serve(
      {testing::tiny_model(), "--served-model-name", "tiny", "--threads", "1", "--disable-log-stats"});
  ASSERT_NE(serve.port(), 0) << serve.log();
  auto r = post_json(serve.port(), "/v1/completions", {{"model", "tiny"}, {"prompt", {1, 2, 3}}, {"max_tokens", 4}});
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(testing::http_request(serve.port(), "GET", "/nope").status, 404u);
  serve.terminate_and_wait();
  EXPECT_THAT(serve.log(), HasSubstr("stopped"));
  EXPECT_THAT(serve.log(), Not(HasSubstr("HTTP/1.1\"")));
  EXPECT_THAT(serve.log(), Not(HasSubstr("Avg prompt throughput")));
}

}  // namespace
}  // namespace moeserve
