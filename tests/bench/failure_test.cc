// Runs that fail: against a fake server that fails some samples, all of them, dies during the run, wants an API key
// or serves the other API. A failed sample makes the run INVALID with "n of m samples failed" in every output, the
// preflight request stops a run that cannot work before anything is timed, too many failures in a row end the run,
// and every failure says what is wrong.
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <cstdlib>
#include <filesystem>
#include <regex>

#include "bench/driver.h"
#include "bench/report.h"
#include "bench/sut_http.h"
#include "bench_test_util.h"
#include "fake_server.h"
#include "util/files.h"

namespace moeserve::bench {
namespace {

using testing::error_of;
using testing::FakeServerOptions;
using testing::FakeStreamingServer;
using testing::run_against;

std::string file_text(const std::string& dir, const std::string& name) {
  return read_text_file((std::filesystem::path(dir) / name).string());
}

// How many of the run's samples have qsl_idx in `failing`.
uint64_t samples_in(const RunResult& r, const std::set<int32_t>& failing) {
  uint64_t n = 0;
  for (const SampleRecord& s : r.samples) n += failing.contains(static_cast<int32_t>(s.qsl_idx));
  return n;
}

TEST(FailedSamples, SomeFailedMakeThePerformanceRunInvalidEverywhere) {
  FakeServerOptions server;
  server.failing_first_tokens = {2, 5};
  const BenchConfig config = testing::small_run(Scenario::server, TestMode::performance_only, 8, 64, "fail-some");
  const RunResult r = run_against(server, config, 8);
  ASSERT_TRUE(r.verdict.has_value());
  const uint64_t failed = samples_in(r, {2, 5});
  ASSERT_GT(failed, 0u);
  EXPECT_EQ(r.failed_samples, failed);
  EXPECT_FALSE(r.verdict->valid);
  EXPECT_FALSE(run_valid(r));
  const std::string count = fmt::format("{} of {} samples failed", failed, r.samples.size());
  EXPECT_NE(std::find(r.verdict->reasons.begin(), r.verdict->reasons.end(), count), r.verdict->reasons.end());

  const std::string summary = file_text(config.output_dir, "mlperf_log_summary.txt");
  EXPECT_NE(summary.find("Result is : INVALID"), std::string::npos);
  EXPECT_NE(summary.find("Samples succeeded : NO (" + count + ")"), std::string::npos) << summary;
  const std::string detail = file_text(config.output_dir, "mlperf_log_detail.txt");
  EXPECT_TRUE(std::regex_search(detail, std::regex("result_invalid_reason.*" + count))) << detail;
  EXPECT_NE(detail.find("HTTP 500 Internal Server Error on /v1/completions"), std::string::npos);

  const nlohmann::json json = result_json(r, {{"scenario", "Server"}});
  EXPECT_EQ(json["validity"], "INVALID");
  EXPECT_EQ(json["samples_failed"], failed);
  EXPECT_EQ(json["samples_issued"], r.samples.size());
  EXPECT_NE(report_html(json).find(count), std::string::npos);
  EXPECT_NE(result_headline(json).find("INVALID: " + count), std::string::npos);
}

TEST(FailedSamples, AnAccuracyRunWithAFailedSampleIsInvalid) {
  FakeServerOptions server;
  server.failing_first_tokens = {3};
  const BenchConfig config = testing::small_run(Scenario::offline, TestMode::accuracy_only, 6, 64, "fail-accuracy");
  const RunResult r = run_against(server, config, 6);
  EXPECT_EQ(r.failed_samples, 1u);
  EXPECT_FALSE(run_valid(r));
  EXPECT_NE(r.summary_text.find("Accuracy run INVALID: 1 of 6 samples failed"), std::string::npos) << r.summary_text;
  const nlohmann::json json = result_json(r, {{"scenario", "Offline"}});
  EXPECT_EQ(json["validity"], "INVALID");
  EXPECT_NE(report_html(json).find("1 of 6 samples failed"), std::string::npos);

  // The same run without the failure is VALID.
  const RunResult good = run_against(FakeServerOptions{}, config, 6);
  EXPECT_TRUE(run_valid(good)) << (good.errors.empty() ? "" : good.errors.front());
  EXPECT_EQ(result_json(good, {{"scenario", "Offline"}})["validity"], "VALID");
}

TEST(Preflight, IsOneShortRequestBeforeTheRun) {
  std::vector<nlohmann::json> requests;
  const BenchConfig config = testing::small_run(Scenario::offline, TestMode::accuracy_only, 4, 64, "preflight");
  const RunResult r = run_against(FakeServerOptions{}, config, 4, &requests);
  ASSERT_EQ(requests.size(), 5u);
  EXPECT_EQ(requests.front()["max_tokens"], 2);
  EXPECT_EQ(requests.front()["prompt"], nlohmann::json({0, 7, 7}));  // the first sample's first tokens (3 here)
  EXPECT_EQ(r.samples.size(), 4u);  // not a sample of the run
  for (size_t i = 1; i < requests.size(); ++i) EXPECT_EQ(requests[i]["max_tokens"], 64);
}

TEST(Preflight, AFailureStopsTheRunBeforeAnythingIsTimed) {
  FakeServerOptions server;
  server.status = 500;
  FakeStreamingServer fake(server);
  HttpSutOptions o;
  o.endpoint = fake.url();
  HttpSut sut(o);
  const BenchConfig config = testing::small_run(Scenario::server, TestMode::performance_only, 8, 64, "preflight-500");
  const std::string error = error_of([&] { run_benchmark(sut, testing::numbered_dataset(8), config); });
  EXPECT_NE(error.find("preflight request failed, nothing was timed: HTTP 500 Internal Server Error on "
                       "/v1/completions: {\"error\": {\"message\": \"fake failure\"}}"),
            std::string::npos)
      << error;
  EXPECT_EQ(fake.requests().size(), 1u);
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(config.output_dir) / "mlperf_log_summary.txt"));
}

TEST(ConsecutiveFailures, EndTheRunWithTheReason) {
  FakeServerOptions server;
  server.fail_after_requests = 1;  // the preflight passes, then the server fails everything
  BenchConfig config = testing::small_run(Scenario::single_stream, TestMode::performance_only, 40, 64, "abort");
  config.max_consecutive_failures = 4;
  std::vector<nlohmann::json> requests;
  const RunResult r = run_against(server, config, 40, &requests);
  // SingleStream issues a sample after the previous one completes: the fourth failure is the last sample issued.
  EXPECT_EQ(r.samples.size(), 4u);
  EXPECT_EQ(requests.size(), 5u);
  EXPECT_EQ(r.aborted, "4 consecutive samples failed, the last with: HTTP 500 Internal Server Error on "
                       "/v1/completions: {\"error\": {\"message\": \"fake failure\"}}");
  EXPECT_NE(std::find(r.errors.begin(), r.errors.end(),
                      "Ending early: " + r.aborted + "; outstanding samples were cancelled"),
            r.errors.end());
  EXPECT_FALSE(r.interrupted);
  EXPECT_FALSE(run_valid(r));
  EXPECT_NE(r.summary_text.find("4 of 4 samples failed"), std::string::npos);
}

TEST(ConsecutiveFailures, ASuccessResetsTheCount) {
  FakeServerOptions server;
  server.failing_first_tokens = {1, 2, 4, 5, 7, 8};  // 6 of 10 fail
  BenchConfig config = testing::small_run(Scenario::single_stream, TestMode::accuracy_only, 10, 64, "no-abort");
  config.max_consecutive_failures = 3;
  const RunResult r = run_against(server, config, 10);
  // In issue order (SingleStream: one at a time), the run ends at the first third failure in a row, if any.
  size_t streak = 0, longest = 0, expected_issued = 10;
  for (size_t i = 0; i < r.samples.size(); ++i) {
    streak = server.failing_first_tokens.contains(static_cast<int32_t>(r.samples[i].qsl_idx)) ? streak + 1 : 0;
    longest = std::max(longest, streak);
    if (streak == 3 && expected_issued == 10) expected_issued = i + 1;
  }
  EXPECT_EQ(r.samples.size(), expected_issued);
  EXPECT_EQ(r.aborted.empty(), longest < 3) << r.aborted;
  EXPECT_GE(r.failed_samples, 3u);  // more failures than the limit, in all: only a run of them ends the run
}

// A port on which nothing listens.
std::string closed_port() {
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::acceptor acceptor(ioc, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return std::to_string(acceptor.local_endpoint().port());
}

TEST(HttpFailures, ConnectionRefusedSaysIsTheServerRunning) {
  const std::string port = closed_port();
  const std::string expected = "connection refused at 127.0.0.1:" + port + ": is the server running?";
  const BenchConfig config = testing::small_run(Scenario::offline, TestMode::accuracy_only, 2, 8, "refused");
  HttpSutOptions o;
  o.endpoint = "http://127.0.0.1:" + port;
  HttpSut learn_model(o);  // the served model is asked for first
  EXPECT_EQ(error_of([&] { run_benchmark(learn_model, testing::numbered_dataset(2), config); }),
            "--endpoint " + o.endpoint + ": " + expected);
  o.model = "given";
  HttpSut given_model(o);  // then the preflight request finds it
  EXPECT_EQ(error_of([&] { run_benchmark(given_model, testing::numbered_dataset(2), config); }),
            "preflight request failed, nothing was timed: " + expected);
}

TEST(HttpFailures, AnApiKeyIsAskedForRefusedWhenWrongAndAcceptedWhenRight) {
  FakeServerOptions server;
  server.api_key = "sekret";
  const BenchConfig config = testing::small_run(Scenario::offline, TestMode::accuracy_only, 3, 8, "api-key");
  HttpSutOptions client;
  EXPECT_NE(error_of([&] { run_against(server, config, 3, nullptr, nullptr, client); })
                .find("HTTP 401 Unauthorized on /v1/models: pass --api-key or set OPENAI_API_KEY"),
            std::string::npos);
  client.model = "fake-model";
  EXPECT_NE(error_of([&] { run_against(server, config, 3, nullptr, nullptr, client); })
                .find("preflight request failed, nothing was timed: HTTP 401 Unauthorized on /v1/completions: pass "
                      "--api-key or set OPENAI_API_KEY (the server said: {\"error\": \"Unauthorized\"})"),
            std::string::npos);
  client.api_key = "wrong";
  EXPECT_NE(error_of([&] { run_against(server, config, 3, nullptr, nullptr, client); })
                .find("HTTP 401 Unauthorized on /v1/completions: the server refused the API key"),
            std::string::npos);
  client.api_key = "sekret";
  client.model.clear();
  const RunResult r = run_against(server, config, 3, nullptr, nullptr, client);
  EXPECT_TRUE(run_valid(r)) << (r.errors.empty() ? "" : r.errors.front());
  EXPECT_EQ(r.samples.size(), 3u);
}

TEST(HttpFailures, TheOtherApisRouteSaysWhichApiToTry) {
  const BenchConfig config = testing::small_run(Scenario::offline, TestMode::accuracy_only, 2, 8, "wrong-api");
  {
    FakeStreamingServer openai_server(FakeServerOptions{});
    HttpSutOptions o;
    o.endpoint = openai_server.url();
    o.api = HttpApi::sglang;
    HttpSut sut(o);
    EXPECT_NE(error_of([&] { run_benchmark(sut, testing::numbered_dataset(2), config); })
                  .find("HTTP 404 Not Found on /generate: is this an SGLang server? try --api openai"),
              std::string::npos);
  }
  FakeServerOptions sglang;
  sglang.api = HttpApi::sglang;
  FakeStreamingServer sglang_server(sglang);
  HttpSutOptions o;
  o.endpoint = sglang_server.url();
  HttpSut sut(o);
  EXPECT_NE(error_of([&] { run_benchmark(sut, testing::numbered_dataset(2), config); })
                .find("HTTP 404 Not Found on /v1/models: is this an OpenAI-compatible server? try --api sglang"),
            std::string::npos);
}

TEST(HttpFailures, TheKeyComesFromTheFlagElseOpenAiApiKey) {
  ::setenv("OPENAI_API_KEY", "from-environment", 1);
  EXPECT_EQ(resolve_api_key("from-flag"), "from-flag");
  EXPECT_EQ(resolve_api_key(""), "from-environment");
  ::unsetenv("OPENAI_API_KEY");
  EXPECT_EQ(resolve_api_key(""), "");
}

}  // namespace
}  // namespace moeserve::bench
