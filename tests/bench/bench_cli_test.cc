// `moeserve bench` as a user runs it, against the fake server in this process: the exit codes (0 VALID, 1 INVALID,
// 2 usage or setup error, 130 interrupted by SIGINT or SIGTERM), the messages of the usual first-run mistakes, and
// the API key: asked for, accepted from --api-key or OPENAI_API_KEY, and kept out of the result file.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <boost/asio.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "fake_server.h"
#include "test_util.h"
#include "util/files.h"

namespace moeserve::bench {
namespace {

using testing::FakeServerOptions;
using testing::FakeStreamingServer;
using namespace std::chrono_literals;

// A JSON-lines dataset of `n` prompts {i, 7, 7} (the fake server's answer identifies each).
std::string write_prompts(const std::string& dir, int n) {
  const std::string path = dir + "/prompts.jsonl";
  std::ofstream out(path);
  for (int i = 0; i < n; ++i) out << "{\"input_tokens\": [" << i << ", 7, 7]}\n";
  return path;
}

// `moeserve bench` over the 4-prompt dataset in `dir` against `url`, with `flags`.
std::string bench_command(const std::string& dir, const std::string& url, const std::string& flags) {
  return fmt::format("{} bench --endpoint {} --dataset {} --no-progress --output-dir {}/out {}", MOESERVE_BINARY, url,
                     write_prompts(dir, 4), dir, flags);
}

// An Offline run (unless `flags` name another scenario) in a fresh directory.
moeserve::testing::CommandResult bench(const std::string& url, const std::string& flags,
                                       const std::string& environment = "") {
  const std::string dir = moeserve::testing::temp_dir("bench-cli");
  const std::string scenario = flags.find("--scenario") == std::string::npos ? "--scenario offline " : "";
  return moeserve::testing::run_command(environment + bench_command(dir, url, scenario + flags));
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(BenchCli, ExitsZeroWhenValidAndOneWhenASampleFailed) {
  FakeStreamingServer good(FakeServerOptions{});
  const auto valid = bench(good.url(), "--accuracy");
  EXPECT_EQ(valid.exit_code, 0) << valid.output;
  EXPECT_TRUE(contains(valid.output, "accuracy on moeserve-http-openai")) << valid.output;

  FakeServerOptions failing;
  failing.failing_first_tokens = {1};
  FakeStreamingServer bad(failing);
  const auto invalid = bench(bad.url(), "--accuracy");
  EXPECT_EQ(invalid.exit_code, 1) << invalid.output;
  EXPECT_TRUE(contains(invalid.output, "Accuracy run INVALID: 1 of 4 samples failed")) << invalid.output;
  const auto performance = bench(bad.url(), "--min-duration 0 --min-query-count 4");
  EXPECT_EQ(performance.exit_code, 1) << performance.output;
  EXPECT_TRUE(contains(performance.output, "Samples succeeded : NO (1 of 4 samples failed)")) << performance.output;
}

TEST(BenchCli, SetupErrorsExitTwoSayingWhatIsWrong) {
  std::string port;
  {
    boost::asio::io_context ioc;
    boost::asio::ip::tcp::acceptor acceptor(ioc, {boost::asio::ip::make_address("127.0.0.1"), 0});
    port = std::to_string(acceptor.local_endpoint().port());
  }
  const auto refused = bench("http://127.0.0.1:" + port, "--served-model m");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_TRUE(contains(refused.output, "connection refused at 127.0.0.1:" + port + ": is the server running?"))
      << refused.output;

  FakeStreamingServer openai(FakeServerOptions{});
  const auto wrong_api = bench(openai.url(), "--api sglang");
  EXPECT_EQ(wrong_api.exit_code, 2) << wrong_api.output;
  EXPECT_TRUE(contains(wrong_api.output, "HTTP 404 Not Found on /generate: is this an SGLang server? try --api openai"))
      << wrong_api.output;

  const auto usage = bench(openai.url(), "--scenario nonsense");
  EXPECT_EQ(usage.exit_code, 2) << usage.output;
  const auto key_in_process = moeserve::testing::run_command(
      std::string(MOESERVE_BINARY) + " bench --model /nonexistent --dataset synthetic --api-key k");
  EXPECT_EQ(key_in_process.exit_code, 2) << key_in_process.output;
  EXPECT_TRUE(contains(key_in_process.output, "--api-key is for --endpoint")) << key_in_process.output;

  const auto help = moeserve::testing::run_command(std::string(MOESERVE_BINARY) + " bench --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(contains(help.output, "Exit codes: 0 VALID; 1 INVALID")) << help.output;
}

TEST(BenchCli, TheApiKeyIsAskedForThenSentFromTheFlagOrTheEnvironmentAndNotRecorded) {
  FakeServerOptions keyed;
  keyed.api_key = "sekret";
  FakeStreamingServer server(keyed);
  const auto missing = bench(server.url(), "--accuracy");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_TRUE(contains(missing.output, "HTTP 401 Unauthorized on /v1/models: pass --api-key or set OPENAI_API_KEY"))
      << missing.output;

  const std::string dir = moeserve::testing::temp_dir("bench-cli-key");
  const auto flag = moeserve::testing::run_command(
      bench_command(dir, server.url(), "--scenario offline --accuracy --api-key sekret"));
  EXPECT_EQ(flag.exit_code, 0) << flag.output;
  const std::string result = read_text_file(dir + "/out/moeserve_result.json");
  EXPECT_FALSE(contains(result, "sekret"));
  EXPECT_TRUE(contains(result, "--api-key <redacted>"));

  const auto environment = bench(server.url(), "--accuracy", "OPENAI_API_KEY=sekret ");
  EXPECT_EQ(environment.exit_code, 0) << environment.output;
}

// Runs the bench in the background, sends `signal` once the server has the preflight and the first sample, and
// returns the bench's exit code and output.
std::pair<int, std::string> interrupted_run(int signal) {
  FakeServerOptions slow;
  slow.token_interval = 300ms;  // each sample streams for over a second
  FakeStreamingServer server(slow);
  const std::string dir = moeserve::testing::temp_dir("bench-cli-signal");
  const std::string command = bench_command(dir, server.url(), "--accuracy --scenario singlestream");
  moeserve::testing::CommandResult result;
  std::atomic<bool> ended{false};
  std::thread run([&] {
    result =
        moeserve::testing::run_command("{ " + command + " & echo $! > " + dir + "/pid; wait $!; echo \"rc=$?\"; }");
    ended = true;
  });
  while (server.requests().size() < 2 && !ended) std::this_thread::sleep_for(10ms);
  const pid_t pid = std::stoi(read_text_file(dir + "/pid"));
  ::kill(pid, signal);
  run.join();
  const size_t rc = result.output.rfind("rc=");
  EXPECT_NE(rc, std::string::npos) << result.output;
  EXPECT_TRUE(std::filesystem::exists(dir + "/out/mlperf_log_summary.txt"));  // the logs are still written
  // And the report says so: the banner and the constraint row.
  const std::string html = read_text_file(dir + "/out/moeserve_report.html");
  EXPECT_TRUE(contains(html, "<span class=\"word\">INVALID (interrupted)</span>")) << html;
  EXPECT_TRUE(contains(html, "<th>run completed</th><td>interrupted (Ctrl-C or SIGTERM)</td>")) << html;
  return {rc == std::string::npos ? -1 : std::stoi(result.output.substr(rc + 3)), result.output};
}

TEST(BenchCli, SigintAndSigtermExit130AfterWritingTheLogs) {
  for (int signal : {SIGINT, SIGTERM}) {
    const auto [code, output] = interrupted_run(signal);
    EXPECT_EQ(code, 130) << output;
    EXPECT_TRUE(contains(output, "Ending early: interrupted; outstanding samples were cancelled")) << output;
  }
}

TEST(BenchCli, ProgressPrintsPlainLinesOffATerminal) {
  FakeStreamingServer server(FakeServerOptions{});
  const std::string dir = moeserve::testing::temp_dir("bench-cli-progress");
  // Not --no-progress: the test's stderr is a pipe, so the progress comes as plain lines (the last at the end).
  const auto r = moeserve::testing::run_command(
      fmt::format("{} bench --endpoint {} --dataset {} --output-dir {}/out --scenario server --target-qps 50 "
                  "--min-duration 0.05 --min-query-count 4",
                  MOESERVE_BINARY, server.url(), write_prompts(dir, 4), dir));
  EXPECT_EQ(r.exit_code, 1) << r.output;  // four queries cannot meet early stopping
  EXPECT_TRUE(contains(r.output, "Server PerformanceOnly: ")) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("issued (\\d+)/\\1 samples \\(min_query_count 4"))) << r.output;
  EXPECT_TRUE(contains(r.output, "p99 TTFT ")) << r.output;
  EXPECT_TRUE(contains(r.output, "| 0 errors | ")) << r.output;
  EXPECT_TRUE(contains(r.output, "ETA 0s")) << r.output;
  EXPECT_FALSE(contains(r.output, "\r")) << r.output;
}

TEST(BenchCli, FindPeakProbesRecordsEveryProbeAndConfirms) {
  FakeStreamingServer server(FakeServerOptions{});
  const std::string dir = moeserve::testing::temp_dir("bench-cli-find-peak");
  // The fake server answers at once: every probe passes, so three probes bracket upwards and the search confirms
  // at the last; 16 queries cannot meet early stopping, so each confirmation fails and backs off.
  const auto r = moeserve::testing::run_command(
      fmt::format("{} bench --endpoint {} --dataset {} --no-progress --output-dir {}/out --scenario server "
                  "--target-qps 20 --find-peak --find-peak-max-probes 3 --find-peak-probe-duration 0.2 "
                  "--min-duration 0.2 --min-query-count 4",
                  MOESERVE_BINARY, server.url(), write_prompts(dir, 4), dir));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  for (const char* line : {"find-peak: probe at 20 qps", "find-peak: 40 qps VALID", "find-peak: probe at 80 qps",
                           "find-peak: confirming run at 80 qps (full settings)", "confirming run at 72 qps",
                           "find-peak: no confirming run was VALID (3 tried, down to 64.8 qps)"})
    EXPECT_TRUE(contains(r.output, line)) << line << "\n" << r.output;
  const nlohmann::json result = nlohmann::json::parse(read_text_file(dir + "/out/moeserve_result.json"));
  ASSERT_TRUE(result.contains("find_peak"));
  EXPECT_EQ(result["find_peak"]["probes"].size(), 6u);
  EXPECT_EQ(result["find_peak"]["probes"][0]["kind"], "bracket");
  EXPECT_TRUE(std::filesystem::exists(dir + "/out/find_peak/probe_01_qps_20/mlperf_log_summary.txt"));
  const std::string html = read_text_file(dir + "/out/moeserve_report.html");
  EXPECT_TRUE(contains(html, "<table id=\"find-peak-probes\">"));
  EXPECT_TRUE(contains(html, "<p class=\"sub\">endpoint " + server.url() + " (model ")) << html;
}

TEST(BenchCli, CompareTwoRunsGivesTheRatiosAndAPage) {
  FakeStreamingServer fast(FakeServerOptions{});
  FakeServerOptions slow_options;
  slow_options.token_interval = 20ms;
  FakeStreamingServer slow(slow_options);
  const std::string dir = moeserve::testing::temp_dir("bench-cli-compare");
  for (const auto& [name, url] : {std::pair{"fast", fast.url()}, {"slow", slow.url()}}) {
    const auto r = moeserve::testing::run_command(
        fmt::format("{} bench --endpoint {} --dataset {} --no-progress --output-dir {}/{} --scenario offline "
                    "--min-duration 0 --min-query-count 4",
                    MOESERVE_BINARY, url, write_prompts(dir, 4), dir, name));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  const auto compared = moeserve::testing::run_command(
      fmt::format("{} bench compare {}/fast {}/slow/moeserve_result.json --output {}/compare.html", MOESERVE_BINARY,
                  dir, dir, dir));
  ASSERT_EQ(compared.exit_code, 0) << compared.output;
  EXPECT_TRUE(contains(compared.output, "throughput (output tokens/s)")) << compared.output;
  EXPECT_TRUE(contains(compared.output, "(x0.")) << compared.output;  // the slow server's throughput ratio
  EXPECT_TRUE(contains(compared.output, "[2] " + dir + "/slow/moeserve_result.json")) << compared.output;
  EXPECT_TRUE(contains(read_text_file(dir + "/compare.html"), "<table id=\"compare\">"));
  // One file is not a comparison; a file that is not a result says so.
  EXPECT_EQ(moeserve::testing::run_command(fmt::format("{} bench compare {}/fast", MOESERVE_BINARY, dir)).exit_code, 2);
  write_text_file(dir + "/other.json", "{}");
  const auto other = moeserve::testing::run_command(
      fmt::format("{} bench compare {}/fast {}/other.json --output {}/x.html", MOESERVE_BINARY, dir, dir, dir));
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_TRUE(contains(other.output, "is not a moeserve bench result")) << other.output;
}

}  // namespace
}  // namespace moeserve::bench
