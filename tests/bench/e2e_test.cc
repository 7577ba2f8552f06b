// The bench end to end on the tiny model: in process and over HTTP against the OpenAI server (`moeserve serve`'s
// server, run inside the test). The accuracy log must decode to exactly the tokens the model generates (checked
// against generate_sequence, greedy), and TTFT and TPOT measured by the bench must agree with the engine's own
// timestamps: exactly in process, within the network overhead over HTTP.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "bench/driver.h"
#include "bench/report.h"
#include "bench/sut_http.h"
#include "bench/sut_inprocess.h"
#include "bench_test_util.h"
#include "engine/generate.h"
#include "eval/accuracy_log.h"
#include "model/gpt_oss/checkpoint.h"
#include "runner/cpu/cpu_runner.h"
#include "server/openai_server.h"
#include "tokenizer/tokenizer.h"
#include "util/files.h"

namespace moeserve::bench {
namespace {

constexpr int kMaxTokens = 12;

std::shared_ptr<const Checkpoint> tiny_checkpoint() {
  static auto c = std::shared_ptr<const Checkpoint>(Checkpoint::open(moeserve::testing::tiny_model()));
  return c;
}

Dataset prompts(int n) {
  Dataset d;
  d.format = "test";
  d.path = "harmony-like prompts";
  for (int p = 0; p < n; ++p)
    d.samples.push_back({{200006, 1428, 200008, 1000 + p * 37, 2000 + p, 200007, 200006}, 0, "", ""});
  return d;
}

// What the model generates for each prompt alone, greedy, stopping at its end-of-sequence tokens.
std::vector<std::vector<int32_t>> reference_outputs(const Dataset& d) {
  CpuRunner runner(tiny_checkpoint(), 2);
  std::vector<std::vector<int32_t>> out;
  for (const DatasetSample& s : d.samples) {
    GenerateOptions o;
    o.max_tokens = kMaxTokens;
    o.sampling.temperature = 0;
    o.stop_tokens = tiny_checkpoint()->config().eos_token_ids;
    out.push_back(generate_sequence(runner, s.prompt, o).tokens);
  }
  return out;
}

std::shared_ptr<Engine> tiny_engine() {
  EngineConfig config;
  config.num_kv_blocks = 2048;
  return std::make_shared<Engine>(std::make_shared<CpuRunner>(tiny_checkpoint(), 2), config);
}

// The engine publishes its metrics after each step, a moment after the step's events: wait for `samples` TTFTs.
EngineMetrics settled_metrics(const Engine& engine, size_t samples) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  EngineMetrics m = engine.metrics();
  while (m.ttft.count() < samples && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    m = engine.metrics();
  }
  return m;
}

std::vector<int32_t> eos() {
  const auto& ids = tiny_checkpoint()->config().eos_token_ids;
  return {ids.begin(), ids.end()};
}

// Every accuracy-log entry decodes to the reference tokens of its sample, and every sample appears.
void expect_accuracy_log_matches(const std::string& dir, const std::vector<std::vector<int32_t>>& expected,
                                 bool with_token_data) {
  const auto entries = eval::read_accuracy_log((std::filesystem::path(dir) / "mlperf_log_accuracy.json").string());
  ASSERT_EQ(entries.size(), expected.size());
  std::set<int64_t> seen;
  for (const auto& e : entries) {
    const auto& want = expected.at(static_cast<size_t>(e.qsl_idx));
    EXPECT_EQ(eval::hex_to_int32(e.data), want) << "qsl_idx " << e.qsl_idx;
    EXPECT_EQ(e.token_count, static_cast<int64_t>(want.size()));
    EXPECT_EQ(e.token_data.has_value(), with_token_data);
    if (with_token_data) {
      EXPECT_EQ(eval::hex_to_int32(*e.token_data), std::vector<int32_t>{want.front()});
    }
    seen.insert(e.qsl_idx);
  }
  EXPECT_EQ(seen.size(), expected.size());
}

TEST(BenchEndToEnd, InProcessAccuracyLogIsTheGeneratedTokens) {
  const Dataset d = prompts(6);
  const auto expected = reference_outputs(d);
  for (Scenario scenario : {Scenario::offline, Scenario::server}) {
    InProcessSut sut(tiny_engine(), eos(), {{"kind", "test"}});
    const BenchConfig config = testing::small_run(scenario, TestMode::accuracy_only, 6, kMaxTokens, "e2e-inprocess");
    const RunResult r = run_benchmark(sut, d, config);
    EXPECT_TRUE(r.errors.empty()) << r.errors.front();
    expect_accuracy_log_matches(config.output_dir, expected, scenario == Scenario::server);
  }
}

TEST(BenchEndToEnd, InProcessTimesAreTheEnginesOwn) {
  auto engine = tiny_engine();
  InProcessSut sut(engine, eos(), {{"kind", "test"}});
  BenchConfig config = testing::small_run(Scenario::server, TestMode::performance_only, 6, kMaxTokens, "e2e-times");
  config.preflight = false;  // the engine's histograms would count the preflight request too
  const RunResult r = run_benchmark(sut, prompts(6), config);
  ASSERT_TRUE(r.summary.has_value());
  EXPECT_TRUE(r.errors.empty());
  // The engine's histograms measure TTFT from the request's arrival, which the bench set to the scheduled time.
  const EngineMetrics m = settled_metrics(*engine, r.samples.size());
  ASSERT_EQ(m.ttft.count(), r.samples.size());
  double ttft_sum = 0;
  for (const SampleRecord& s : r.samples)
    ttft_sum += std::chrono::duration<double>(*s.first_token_at - s.scheduled).count();
  EXPECT_NEAR(ttft_sum, m.ttft.sum(), 1e-6 * static_cast<double>(r.samples.size()));
  // And the report files exist and hold the run.
  const nlohmann::json json = result_json(r, {{"scenario", "Server"}});
  const std::string html = write_reports(config.output_dir, json);
  EXPECT_TRUE(std::filesystem::exists(html));
  EXPECT_EQ(json["result"]["samples"], r.samples.size());
  // The engine's own series over the run: the tokens the samples hold, but perhaps the last step's (the engine
  // publishes its counters a moment after a step's events, at most one token per sample here), and the batch.
  const nlohmann::json& engine_series = json["sut_timeline"];
  ASSERT_FALSE(engine_series.is_null());
  uint64_t generated = 0;
  size_t widest = 0;
  for (const auto& n : engine_series["generated_tokens"]) generated += n.get<uint64_t>();
  for (const auto& n : engine_series["running"]) widest = std::max(widest, n.get<size_t>());
  uint64_t tokens = 0;
  for (const SampleRecord& s : r.samples) tokens += static_cast<uint64_t>(s.token_count);
  EXPECT_LE(generated, tokens) << engine_series.dump();
  EXPECT_GE(generated + r.samples.size(), tokens) << engine_series.dump();
  EXPECT_GE(widest, 1u);
  EXPECT_NE(read_text_file(html).find("data-chart=\"engine-batch\""), std::string::npos);
}

struct ServedTiny {
  std::shared_ptr<Engine> engine = tiny_engine();
  std::unique_ptr<server::OpenAiServer> server;
  ServedTiny() {
    server::ServerOptions options;
    options.http.port = 0;
    options.served_model_name = "tiny";
    server = std::make_unique<server::OpenAiServer>(engine, Tokenizer::o200k_harmony(), options);
    server->start();
  }
  // As the server tests' harnesses do: drain before destroying. A finished request's job (its response channel,
  // whose session lives in the server's io_context, and the count() callback into the server) is released on the
  // engine thread after the client has read the whole response: ctx_.count(200) after finish_events(), and the
  // Sequence in EngineCore::retired_ until the end of the step. ~OpenAiServer alone does not wait for that, so the
  // shared engine's thread could post to a destroyed io_context and decrement a freed connection count.
  ~ServedTiny() { server->shutdown(); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server->port()); }
};

TEST(BenchEndToEnd, OverHttpTheAccuracyLogIsTheGeneratedTokens) {
  const Dataset d = prompts(6);
  const auto expected = reference_outputs(d);
  ServedTiny served;
  HttpSutOptions o;
  o.endpoint = served.url();
  HttpSut sut(o);
  const BenchConfig config = testing::small_run(Scenario::server, TestMode::accuracy_only, 6, kMaxTokens, "e2e-http");
  const RunResult r = run_benchmark(sut, d, config);
  EXPECT_TRUE(r.errors.empty()) << r.errors.front();
  expect_accuracy_log_matches(config.output_dir, expected, true);
}

TEST(BenchEndToEnd, OverHttpTtftAndTpotAgreeWithTheEngineWithinNetworkOverhead) {
  ServedTiny served;
  HttpSutOptions o;
  o.endpoint = served.url();
  HttpSut sut(o);
  BenchConfig config =
      testing::small_run(Scenario::server, TestMode::performance_only, 6, kMaxTokens, "e2e-http-times");
  config.preflight = false;  // the engine's histograms would count the preflight request too
  const RunResult r = run_benchmark(sut, prompts(6), config);
  ASSERT_TRUE(r.summary.has_value());
  EXPECT_TRUE(r.errors.empty()) << r.errors.front();
  const EngineMetrics m = settled_metrics(*served.engine, r.samples.size());
  ASSERT_EQ(m.ttft.count(), r.samples.size());
  double ttft = 0, tpot = 0;
  size_t tpot_samples = 0;
  for (const SampleRecord& s : r.samples) {
    const double first = std::chrono::duration<double>(*s.first_token_at - s.scheduled).count();
    const double latency = std::chrono::duration<double>(s.completed_at - s.scheduled).count();
    ttft += first;
    if (s.token_count > 1) {
      tpot += (latency - first) / static_cast<double>(s.token_count - 1);
      ++tpot_samples;
    }
  }
  const double n = static_cast<double>(r.samples.size());
  // Over HTTP the clock starts before the request is sent and stops when the event is read: the bench's mean TTFT
  // exceeds the engine's by the loopback round trip and request handling, a few milliseconds at most.
  const double ttft_gap = ttft / n - m.ttft.sum() / n;
  EXPECT_GE(ttft_gap, 0.0);
  EXPECT_LT(ttft_gap, 0.050);
  ASSERT_EQ(m.tpot.count(), tpot_samples);
  EXPECT_NEAR(tpot / static_cast<double>(tpot_samples), m.tpot.sum() / static_cast<double>(tpot_samples), 0.005);
}

}  // namespace
}  // namespace moeserve::bench
