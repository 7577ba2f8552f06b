// /metrics as Prometheus and dashboards made for vLLM read it: every vLLM series of the fixture
// (tests/fixtures/vllm/production_metrics.prom, from vLLM's "Production Metrics" page) with its type and a
// model_name label, counters that only grow, and a bounded route label.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "engine/speculative/speculative_config.h"
#include "engine/speculative/test_drafters.h"
#include "server/http_client.h"
#include "server/scripted_runner.h"
#include "server/server_harness.h"
#include "server/stats_logger.h"
#include "test_util.h"

namespace moeserve {
namespace {

using nlohmann::json;
using testing::post_json;
using testing::ServerHarness;

std::vector<int32_t> short_reply(const std::vector<int32_t>&) {
  return testing::encode("<|channel|>final<|message|>Hello there.<|return|>");
}

// "# TYPE name type" lines: name -> type.
std::map<std::string, std::string> families(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    const size_t space = line.find(' ', 7);
    out[line.substr(7, space - 7)] = line.substr(space + 1);
  }
  return out;
}

// The value of the one sample line that starts with `series` (name and labels as written).
double sample(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  EXPECT_NE(at, std::string::npos) << series;
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

std::string metrics(const ServerHarness& h) {
  auto r = testing::http_request(h.port, "GET", "/metrics");
  EXPECT_EQ(r.status, 200u);
  return r.body;
}

TEST(Metrics, CoverEveryVllmSeriesOfTheFixtureWithItsTypeAndModelName) {
  // The tiny model speculating with random drafts, so that speculative decoding's series have samples too.
  EngineConfig config;
  config.speculative = speculative::parse_speculative_config(R"({"method":"test_random","num_speculative_tokens":2})");
  config.drafter = std::make_shared<speculative::RandomDrafter>(testing::tiny_checkpoint()->config().vocab_size);
  ServerHarness h(testing::tiny_runner(), {}, config);
  auto r = post_json(h.port, "/v1/completions",
                     {{"model", "tiny"}, {"prompt", {1, 2, 3}}, {"max_tokens", 4}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200u) << r.body;
  std::ifstream in(std::string(MOESERVE_SOURCE_DIR) + "/tests/fixtures/vllm/production_metrics.prom");
  const std::string fixture((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto wanted = families(fixture);
  ASSERT_GE(wanted.size(), 20u);
  const std::string text = metrics(h);
  const auto served = families(text);
  for (const auto& [name, type] : wanted) {
    ASSERT_TRUE(served.contains(name)) << name << " is missing from /metrics";
    EXPECT_EQ(served.at(name), type) << name;
    // At least one series of the family, labelled with the served model's name.
    const std::string series = type == "histogram" ? name + "_count{" : name + "{";
    const size_t at = text.find("\n" + series);
    ASSERT_NE(at, std::string::npos) << name;
    const std::string line = text.substr(at + 1, text.find('\n', at + 1) - at - 1);
    EXPECT_NE(line.find("model_name=\"tiny\""), std::string::npos) << line;
  }
}

TEST(Metrics, CountersAndHistogramsAdvanceWithRequestsAndNoRateDependsOnTheScrape) {
  ServerHarness h(std::make_shared<testing::ScriptedRunner>(short_reply));
  const std::string label = "{model_name=\"tiny\"}";
  const std::string before = metrics(h);
  EXPECT_EQ(sample(before, "vllm:generation_tokens_total" + label), 0);
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(post_json(h.port, "/v1/completions", {{"model", "tiny"}, {"prompt", "Hi"}, {"max_tokens", 3}}).status,
              200u);
  const std::string first = metrics(h);
  const std::string second = metrics(h);
  // Scraping changes nothing: the same counts twice, and no "since the last scrape" gauge.
  EXPECT_EQ(sample(first, "vllm:generation_tokens_total" + label), 6);
  EXPECT_EQ(sample(second, "vllm:generation_tokens_total" + label), 6);
  EXPECT_EQ(second.find("per_second"), std::string::npos);
  EXPECT_EQ(sample(second, "vllm:request_generation_tokens_count" + label), 2);
  EXPECT_EQ(sample(second, "vllm:request_generation_tokens_sum" + label), 6);
  EXPECT_EQ(sample(second, "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"length\"}"), 2);
  // Two intervals between three tokens, per request.
  EXPECT_EQ(sample(second, "vllm:inter_token_latency_seconds_count" + label), 4);
  EXPECT_EQ(sample(second, "vllm:request_prefill_time_seconds_count" + label), 2);
  EXPECT_EQ(sample(second, "vllm:request_decode_time_seconds_count" + label), 2);
  EXPECT_GT(sample(second, "vllm:request_prompt_tokens_sum" + label), 0);
}

TEST(Metrics, UnknownRoutesShareOneLabel) {
  ServerHarness h(std::make_shared<testing::ScriptedRunner>(short_reply));
  for (const char* path : {"/nope", "/a/b/c", "/v1/nothing", "/favicon.ico"})
    EXPECT_EQ(testing::http_request(h.port, "GET", path).status, 404u) << path;
  EXPECT_EQ(testing::http_request(h.port, "GET", "/v1/models/tiny").status, 200u);
  EXPECT_EQ(testing::http_request(h.port, "GET", "/v1/models/other-model").status, 404u);
  const std::string text = metrics(h);
  EXPECT_EQ(sample(text, "moeserve_http_requests_total{route=\"other\",status=\"404\"}"), 4);
  EXPECT_EQ(sample(text, "moeserve_http_requests_total{route=\"/v1/models/{model}\",status=\"200\"}"), 1);
  EXPECT_EQ(sample(text, "moeserve_http_requests_total{route=\"/v1/models/{model}\",status=\"404\"}"), 1);
  EXPECT_EQ(text.find("/nope"), std::string::npos);
  EXPECT_EQ(text.find("favicon"), std::string::npos);
}

TEST(StatsLine, VllmsLineOverTheInterval) {
  EngineMetrics before, now;
  EXPECT_FALSE(server::stats_line(before, now, 10).has_value());  // idle, and nothing runs: no line
  before.prompt_tokens_computed = 1000;
  before.generated_tokens = 40;
  before.prefix_queried_tokens = 500;
  before.prefix_hit_tokens = 100;
  now = before;
  now.prompt_tokens_computed += 100;
  now.generated_tokens += 20;
  now.prefix_queried_tokens += 200;
  now.prefix_hit_tokens += 50;
  now.running = 3;
  now.waiting = 1;
  now.kv_blocks_total = 8;
  now.kv_blocks_in_use = 2;
  EXPECT_EQ(server::stats_line(before, now, 2),
            "Avg prompt throughput: 50.0 tokens/s, Avg generation throughput: 10.0 tokens/s, Running: 3 reqs, "
            "Waiting: 1 reqs, GPU KV cache usage: 25.0%, Prefix cache hit rate: 25.0%");
  now.spec_drafts = 10;
  now.spec_accepted_tokens = 15;
  EXPECT_EQ(server::stats_line(before, now, 2).value_or("").substr(169), ", Mean acceptance length: 2.50");
  // Requests still running over an idle interval (all waiting for blocks, say) still log.
  EXPECT_TRUE(server::stats_line(now, now, 2).has_value());
}

}  // namespace
}  // namespace moeserve
