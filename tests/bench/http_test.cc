// The HTTP system under test: stream decoding for both APIs, and whole bench runs against a fake streaming server
// that sends known tokens after known delays, checking TTFT and TPOT measurement, accuracy-log round trips,
// token counting without ids, errors, keep-alive reuse and many concurrent streams.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "bench/driver.h"
#include "bench/sut_http.h"
#include "bench_test_util.h"
#include "eval/accuracy_log.h"
#include "fake_server.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve::bench {
namespace {

using testing::FakeServerOptions;
using testing::FakeStreamingServer;
using testing::run_against;
using namespace std::chrono_literals;

// Feeds `text` to a decoder in pieces of `step` bytes.
SampleOutput decode_in_pieces(HttpApi api, const std::string& text, size_t step, int* first_token_events = nullptr,
                              std::optional<int32_t>* first_id = nullptr) {
  StreamDecoder decoder(api);
  for (size_t i = 0; i < text.size(); i += step) {
    StreamDecoder::Update u = decoder.feed(std::string_view(text).substr(i, step));
    if (u.first_token && first_token_events) ++*first_token_events;
    if (u.first_token && first_id) *first_id = u.first_token_id;
  }
  return decoder.finish();
}

TEST(StreamDecoder, OpenAiTokenIdsSurviveAnySplit) {
  const std::string stream =
      "data: {\"choices\":[{\"text\":\"a\",\"token_ids\":[5],\"finish_reason\":null}]}\r\n\r\n"
      ": keep-alive comment\n\n"
      "data: {\"choices\":[{\"text\":\"bc\",\"token_ids\":[6,7],\"finish_reason\":\"length\"}]}\n\n"
      "data: {\"choices\":[],\"usage\":{\"completion_tokens\":3}}\n\n"
      "data: [DONE]\n\n";
  for (size_t step : {1, 2, 7, 1000}) {
    int events = 0;
    std::optional<int32_t> first;
    SampleOutput out = decode_in_pieces(HttpApi::openai, stream, step, &events, &first);
    EXPECT_EQ(out.tokens, (std::vector<int32_t>{5, 6, 7})) << step;
    EXPECT_EQ(out.token_count, 3);
    EXPECT_TRUE(out.token_ids_known);
    EXPECT_EQ(out.finish_reason, "length");
    EXPECT_EQ(events, 1);
    EXPECT_EQ(first, 5);
  }
}

TEST(StreamDecoder, OpenAiTextOnlyCountsUsageElseChunks) {
  const std::string text_only =
      "data: {\"choices\":[{\"text\":\"ab\",\"finish_reason\":null}]}\n\n"
      "data: {\"choices\":[{\"text\":\"\",\"finish_reason\":null}]}\n\n"
      "data: {\"choices\":[{\"text\":\"c\",\"finish_reason\":\"stop\"}]}\n\n";
  SampleOutput with_usage = decode_in_pieces(
      HttpApi::openai, text_only + "data: {\"choices\":[],\"usage\":{\"completion_tokens\":4}}\n\n", 5);
  EXPECT_FALSE(with_usage.token_ids_known);
  EXPECT_EQ(with_usage.token_count, 4);
  SampleOutput chunks_only = decode_in_pieces(HttpApi::openai, text_only + "data: [DONE]\n\n", 3);
  EXPECT_EQ(chunks_only.token_count, 2);  // two chunks carried text
  EXPECT_TRUE(chunks_only.tokens.empty());
}

TEST(StreamDecoder, SglangCumulativeAndIncrementalIds) {
  const std::string cumulative =
      "data: {\"text\":\"a\",\"output_ids\":[9],\"meta_info\":{\"completion_tokens\":1,\"finish_reason\":null}}\n\n"
      "data: "
      "{\"text\":\"ab\",\"output_ids\":[9,8,7],\"meta_info\":{\"completion_tokens\":3,\"finish_reason\":null}}\n\n"
      "data: {\"text\":\"abc\",\"output_ids\":[9,8,7,6],\"meta_info\":{\"completion_tokens\":4,"
      "\"finish_reason\":{\"type\":\"stop\"}}}\n\ndata: [DONE]\n\n";
  SampleOutput a = decode_in_pieces(HttpApi::sglang, cumulative, 11);
  EXPECT_EQ(a.tokens, (std::vector<int32_t>{9, 8, 7, 6}));
  EXPECT_EQ(a.finish_reason, "stop");
  const std::string incremental =
      "data: {\"output_ids\":[9],\"meta_info\":{\"completion_tokens\":1}}\n\n"
      "data: {\"output_ids\":[8,7],\"meta_info\":{\"completion_tokens\":3}}\n\n";
  EXPECT_EQ(decode_in_pieces(HttpApi::sglang, incremental, 4).tokens, (std::vector<int32_t>{9, 8, 7}));
  const std::string no_ids = "data: {\"text\":\"x\",\"meta_info\":{\"completion_tokens\":5}}\n\n";
  SampleOutput c = decode_in_pieces(HttpApi::sglang, no_ids, 100);
  EXPECT_FALSE(c.token_ids_known);
  EXPECT_EQ(c.token_count, 5);
}

TEST(StreamDecoder, ErrorEventsAndBadJsonFailTheSample) {
  EXPECT_NE(decode_in_pieces(HttpApi::openai, "data: {\"error\":{\"message\":\"boom\"}}\n\n", 3).error.find("boom"),
            std::string::npos);
  EXPECT_NE(decode_in_pieces(HttpApi::openai, "data: {not json\n\n", 3).error.find("unreadable"), std::string::npos);
}

TEST(StreamDecoder, FieldsOfTheWrongTypeFailTheSampleNamingTheField) {
  // Each of these once threw out of the decoder (nlohmann's type_error), which an I/O thread does not survive.
  const std::vector<std::pair<HttpApi, std::string>> events = {
      {HttpApi::openai, R"({"choices":[{"token_ids":["5"]}]})"},
      {HttpApi::openai, R"({"choices":[{"token_ids":[1e300]}]})"},
      {HttpApi::openai, R"({"choices":[{"token_ids":[-3]}]})"},
      {HttpApi::openai, R"({"choices":[],"usage":{"completion_tokens":"many"}})"},
      {HttpApi::sglang, R"({"output_ids":[1],"meta_info":{"completion_tokens":1.5}})"},
      // bench_fuzz's finding: an integer literal too large for int64 is read as a double, then cast (UB).
      {HttpApi::sglang, R"({"output_ids":[9],"meta_info":{"completion_tokens":2222222222222222222222222222222221}})"},
      {HttpApi::sglang, R"({"output_ids":[{}]})"},
  };
  for (const auto& [api, event] : events) {
    SampleOutput out;
    EXPECT_NO_THROW(out = decode_in_pieces(api, "data: " + event + "\n\n", 4)) << event;
    EXPECT_NE(out.error.find("event '"), std::string::npos) << event << ": " << out.error;
  }
  const SampleOutput counted = decode_in_pieces(HttpApi::openai, R"(data: {"choices":[],"usage":{"completion_tokens":1e300}})"
                                                                 "\n\n", 5);
  EXPECT_NE(counted.error.find("usage.completion_tokens"), std::string::npos) << counted.error;
  // A finish reason of another type is kept as its JSON text; a non-object choice is skipped.
  EXPECT_EQ(decode_in_pieces(HttpApi::sglang, R"(data: {"meta_info":{"finish_reason":{"type":7}}})"
                                              "\n\n", 3)
                .finish_reason,
            R"({"type":7})");
  EXPECT_TRUE(decode_in_pieces(HttpApi::openai, "data: {\"choices\":[5]}\n\n", 2).error.empty());
}

TEST(StreamProtocol, EndpointsAndRequestBodies) {
  HttpEndpoint e = parse_endpoint("http://localhost:8000/api/");
  EXPECT_EQ(e.host, "localhost");
  EXPECT_EQ(e.port, "8000");
  EXPECT_EQ(request_path(HttpApi::openai, e), "/api/v1/completions");
  EXPECT_EQ(request_path(HttpApi::sglang, parse_endpoint("http://h")), "/generate");
  EXPECT_THROW(parse_endpoint("https://h:1"), Error);
  const std::vector<int32_t> prompt = {1, 2, 3};
  SampleRequest r;
  r.prompt = prompt;
  r.max_tokens = 10240;
  r.sampling.temperature = 1.0f;
  nlohmann::json openai = nlohmann::json::parse(request_body(HttpApi::openai, r, "m"));
  EXPECT_EQ(openai["prompt"], nlohmann::json({1, 2, 3}));
  EXPECT_EQ(openai["max_tokens"], 10240);
  EXPECT_EQ(openai["stream"], true);
  EXPECT_EQ(openai["return_token_ids"], true);
  EXPECT_FALSE(openai.contains("top_k"));
  EXPECT_FALSE(openai.contains("ignore_eos"));
  r.min_tokens = 10240;
  nlohmann::json sglang = nlohmann::json::parse(request_body(HttpApi::sglang, r, ""));
  EXPECT_EQ(sglang["input_ids"], nlohmann::json({1, 2, 3}));
  EXPECT_EQ(sglang["sampling_params"]["max_new_tokens"], 10240);
  EXPECT_EQ(sglang["sampling_params"]["min_new_tokens"], 10240);
  EXPECT_EQ(sglang["sampling_params"]["top_k"], -1);
}

TEST(HttpSut, ServerRunMeasuresTtftAndTpotFromTheStream) {
  FakeServerOptions server;
  server.first_token_delay = 60ms;
  server.token_interval = 20ms;
  const BenchConfig config = testing::small_run(Scenario::server, TestMode::performance_only, 8, 64, "http-server");
  std::vector<nlohmann::json> requests;
  RunResult r = run_against(server, config, 8, &requests);
  ASSERT_TRUE(r.summary.has_value());
  EXPECT_TRUE(r.errors.empty()) << r.errors.front();
  ASSERT_GE(r.samples.size(), 16u);  // min_query_count 8, padded by equal issue and min_duration 0.3 s at 40/s
  for (const SampleRecord& s : r.samples) {
    ASSERT_TRUE(s.completed && s.first_token_at);
    const double ttft = std::chrono::duration<double>(*s.first_token_at - s.scheduled).count();
    const double latency = std::chrono::duration<double>(s.completed_at - s.scheduled).count();
    const auto expected = FakeStreamingServer::tokens_for({static_cast<int32_t>(s.qsl_idx)}, 64);
    EXPECT_EQ(s.token_count, static_cast<int64_t>(expected.size()));
    // The server waits 60 ms, then 20 ms per token; the client adds connection and scheduling overhead only.
    EXPECT_GE(ttft, 0.060);
    EXPECT_LT(ttft, 0.060 + 0.25);
    const double tpot = (latency - ttft) / static_cast<double>(s.token_count - 1);
    EXPECT_GE(tpot, 0.015);  // a late first read (a busy machine) shortens the measured span a little
    EXPECT_LT(tpot, 0.020 + 0.03);
  }
  EXPECT_GE(r.summary->first_token.at_target, 60'000'000);
  ASSERT_EQ(requests.size(), r.samples.size() + 1);  // the preflight request first
  EXPECT_EQ(requests.front()["max_tokens"], 2);
  EXPECT_EQ(requests[1]["max_tokens"], 64);
  EXPECT_EQ(requests[1]["model"], "fake-model");  // learnt from /v1/models
  EXPECT_NE(r.summary_text.find("Result is : "), std::string::npos);
  EXPECT_NE(r.summary_text.find("TTFT Early Stopping Result:"), std::string::npos);
}

// Reads mlperf_log_accuracy.json as MLPerf's evaluation scripts do.
nlohmann::json read_accuracy_log(const std::string& dir) {
  return read_json_file((std::filesystem::path(dir) / "mlperf_log_accuracy.json").string());
}

TEST(HttpSut, AccuracyLogDecodesToTheStreamedTokens) {
  for (Scenario scenario : {Scenario::offline, Scenario::server}) {
    FakeServerOptions server;
    const BenchConfig config = testing::small_run(scenario, TestMode::accuracy_only, 12, 64, "http-accuracy");
    RunResult r = run_against(server, config, 12);
    EXPECT_TRUE(r.errors.empty());
    const nlohmann::json log = read_accuracy_log(config.output_dir);
    ASSERT_EQ(log.size(), 12u);
    std::set<int64_t> seen;
    for (const auto& entry : log) {
      const auto qsl_idx = entry["qsl_idx"].get<int32_t>();
      seen.insert(qsl_idx);
      const std::vector<int32_t> expected = FakeStreamingServer::tokens_for({qsl_idx}, 64);
      EXPECT_EQ(eval::hex_to_int32(entry["data"].get<std::string>()), expected);
      EXPECT_EQ(entry["token_count"], expected.size());
      if (scenario == Scenario::server) {
        EXPECT_EQ(eval::hex_to_int32(entry["token_data"].get<std::string>()), std::vector<int32_t>{expected.front()});
      } else {
        EXPECT_FALSE(entry.contains("token_data"));
      }
    }
    EXPECT_EQ(seen.size(), 12u);  // every sample exactly once
  }
}

TEST(HttpSut, SglangApiEndToEnd) {
  for (bool cumulative : {true, false}) {
    FakeServerOptions server;
    server.api = HttpApi::sglang;
    server.sglang_cumulative_ids = cumulative;
    const BenchConfig config = testing::small_run(Scenario::offline, TestMode::accuracy_only, 6, 64, "http-sglang");
    RunResult r = run_against(server, config, 6);
    EXPECT_TRUE(r.errors.empty());
    for (const auto& entry : read_accuracy_log(config.output_dir))
      EXPECT_EQ(eval::hex_to_int32(entry["data"].get<std::string>()),
                FakeStreamingServer::tokens_for({entry["qsl_idx"].get<int32_t>()}, 64));
  }
}

TEST(HttpSut, TextOnlyServerIsCountedAndReported) {
  FakeServerOptions server;
  server.send_token_ids = false;
  const BenchConfig config = testing::small_run(Scenario::offline, TestMode::accuracy_only, 4, 64, "http-text");
  RunResult r = run_against(server, config, 4);
  for (const SampleRecord& s : r.samples) {
    EXPECT_FALSE(s.token_ids_known);
    EXPECT_EQ(s.token_count,
              static_cast<int64_t>(FakeStreamingServer::tokens_for({static_cast<int32_t>(s.qsl_idx)}, 64).size()));
  }
  // Accuracy mode needs ids: each sample is an error in the detail log.
  EXPECT_EQ(r.errors.size(), 4u);
  EXPECT_NE(r.summary_text.find("4 ERRORS encountered"), std::string::npos);
}

TEST(HttpSut, SingleStreamReusesKeepAliveConnections) {
  FakeServerOptions server;
  BenchConfig config = testing::small_run(Scenario::single_stream, TestMode::accuracy_only, 10, 64, "http-keepalive");
  int connections = 0;
  std::vector<nlohmann::json> requests;
  RunResult r = run_against(server, config, 10, &requests, &connections);
  EXPECT_EQ(requests.size(), 11u);  // the preflight and the 10 samples
  EXPECT_LE(connections, 2);        // one for /v1/models, one reused for the preflight and every sample
}

TEST(HttpSut, HoldsHundredsOfConcurrentStreams) {
  FakeServerOptions server;
  server.first_token_delay = 300ms;
  server.token_interval = 10ms;
  const int n = 300;
  const BenchConfig config = testing::small_run(Scenario::offline, TestMode::accuracy_only, n, 64, "http-many");
  const auto begin = std::chrono::steady_clock::now();
  RunResult r = run_against(server, config, n);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  EXPECT_TRUE(r.errors.empty());
  EXPECT_EQ(r.samples.size(), static_cast<size_t>(n));
  // Serially this would take n * 0.3 s; concurrently about 0.35 s plus setup.
  EXPECT_LT(seconds, 15.0);
  // All samples were in flight together: every first token came within the first seconds of the run.
  size_t overlapping = 0;
  for (const SampleRecord& s : r.samples) overlapping += *s.first_token_at - r.start < 5s;
  EXPECT_EQ(overlapping, static_cast<size_t>(n));
}

}  // namespace
}  // namespace moeserve::bench
