// The OpenAI-compatible server in process: endpoints, streaming, errors in OpenAI's shape, cancellation on
// disconnect, raw-socket abuse, and the official openai npm client (tests/server/openai_client.mjs) against it.
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <thread>

#include "engine/generate.h"
#include "harmony/completion.h"
#include "model/gpt_oss/checkpoint.h"
#include "runner/cpu/cpu_runner.h"
#include "server/http_client.h"
#include "server/openai_server.h"
#include "server/scripted_runner.h"
#include "server/server_harness.h"
#include "test_util.h"

namespace moeserve {
namespace {

using nlohmann::json;
using testing::post_json;

using testing::encode;
using testing::expect_error;
using testing::harmony_reply;
using testing::ServerHarness;
using testing::tiny_checkpoint;
using testing::tiny_runner;
using testing::tokenizer;

TEST(Server, HealthModelsAndMetrics) {
  ServerHarness h(tiny_runner());
  auto health = testing::http_request(h.port, "GET", "/health");
  EXPECT_EQ(health.status, 200u);
  auto models = testing::http_request(h.port, "GET", "/v1/models");
  ASSERT_EQ(models.status, 200u);
  EXPECT_EQ(json::parse(models.body)["data"][0]["id"], "tiny");
  auto metrics = testing::http_request(h.port, "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200u);
  for (const char* name : {"moeserve_num_requests_running", "moeserve_kv_cache_usage_ratio",
                           "moeserve_time_to_first_token_seconds_bucket", "moeserve_prefix_cache_hits_total",
                           "moeserve_http_requests_total{route=\"/v1/models\",status=\"200\"} 1"})
    EXPECT_NE(metrics.body.find(name), std::string::npos) << name;
  EXPECT_EQ(testing::http_request(h.port, "GET", "/nope").status, 404u);
  EXPECT_EQ(testing::http_request(h.port, "GET", "/v1/chat/completions").status, 405u);
}

TEST(Server, CompletionsWithTokenIdsEqualGenerate) {
  ServerHarness h(tiny_runner());
  const std::vector<int32_t> prompt = {200006, 17360, 200008, 3575, 553, 17554, 162016, 11};
  auto r = post_json(h.port, "/v1/completions",
                     {{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200u) << r.body;
  json body = json::parse(r.body);
  CpuRunner reference(tiny_checkpoint(), 2);
  GenerateOptions options;
  options.max_tokens = 12;
  options.sampling.temperature = 0;
  const auto expected = generate_sequence(reference, prompt, options).tokens;
  EXPECT_EQ(body["choices"][0]["token_ids"].get<std::vector<int32_t>>(), expected);
  EXPECT_EQ(body["choices"][0]["text"], tokenizer()->decode(expected));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 8);
  EXPECT_EQ(body["usage"]["completion_tokens"], 12);

  // Streaming gives the same ids, chunk by chunk, then [DONE]; usage when asked.
  auto s = post_json(h.port, "/v1/completions",
                     {{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true},
                      {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(s.status, 200u);
  EXPECT_EQ(s.headers["content-type"], "text/event-stream");
  auto events = testing::sse_data(s.body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::vector<int32_t> streamed;
  std::string text;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    json chunk = json::parse(events[i]);
    for (auto id : chunk["choices"][0]["token_ids"]) streamed.push_back(id);
    text += chunk["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(streamed, expected);
  EXPECT_EQ(text, tokenizer()->decode(expected));
  EXPECT_EQ(json::parse(events[events.size() - 2])["usage"]["completion_tokens"], 12);

  // A text prompt and a batch of two prompts.
  auto batch = post_json(h.port, "/v1/completions",
                         {{"model", "tiny"}, {"prompt", {"Hello there", prompt}}, {"max_tokens", 3}, {"temperature", 0}});
  ASSERT_EQ(batch.status, 200u) << batch.body;
  json b = json::parse(batch.body);
  ASSERT_EQ(b["choices"].size(), 2u);
  EXPECT_EQ(b["choices"][1]["token_ids"].get<std::vector<int32_t>>(), std::vector<int32_t>(expected.begin(), expected.begin() + 3));
}

TEST(Server, ChatStreamsReasoningAndContentSeparately) {
  ServerHarness h(std::make_shared<testing::ScriptedRunner>(harmony_reply));
  const json request = {{"model", "tiny"}, {"reasoning_effort", "low"},
                        {"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}}}};
  auto r = post_json(h.port, "/v1/chat/completions", request);
  ASSERT_EQ(r.status, 200u) << r.body;
  json body = json::parse(r.body);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Hello! How can I help?");
  EXPECT_EQ(body["choices"][0]["message"]["reasoning_content"], "The user greets me.");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_GT(body["usage"]["completion_tokens_details"]["reasoning_tokens"].get<int>(), 0);
  EXPECT_EQ(body["usage"]["completion_tokens"], encode("<|channel|>analysis<|message|>The user greets me.<|end|><|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|return|>").size());

  json streaming = request;
  streaming["stream"] = true;
  streaming["stream_options"] = {{"include_usage", true}};
  auto s = post_json(h.port, "/v1/chat/completions", streaming);
  auto events = testing::sse_data(s.body);
  ASSERT_EQ(events.back(), "[DONE]");
  std::string content, reasoning, finish;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    json chunk = json::parse(events[i]);
    if (chunk["choices"].empty()) {
      EXPECT_EQ(chunk["usage"], body["usage"]);
      continue;
    }
    const json& d = chunk["choices"][0]["delta"];
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (!chunk["choices"][0]["finish_reason"].is_null()) finish = chunk["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(content, "Hello! How can I help?");
  EXPECT_EQ(reasoning, "The user greets me.");
  EXPECT_EQ(finish, "stop");

  // Stop strings cut the content.
  json stopped = request;
  stopped["stop"] = "How";
  EXPECT_EQ(json::parse(post_json(h.port, "/v1/chat/completions", stopped).body)["choices"][0]["message"]["content"],
            "Hello! ");
}

TEST(Server, ToolCallsComeBackAsToolCallsAndResultsGoBackIn) {
  ServerHarness h(std::make_shared<testing::ScriptedRunner>(harmony_reply));
  json tools = json::array({{{"type", "function"},
                             {"function", {{"name", "get_weather"}, {"description", "Weather in a city"},
                                           {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}});
  json messages = json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}});
  auto r = post_json(h.port, "/v1/chat/completions", {{"model", "tiny"}, {"messages", messages}, {"tools", tools}});
  ASSERT_EQ(r.status, 200u) << r.body;
  json message = json::parse(r.body)["choices"][0]["message"];
  EXPECT_EQ(json::parse(r.body)["choices"][0]["finish_reason"], "tool_calls");
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris\"}");
  messages.push_back(message);
  messages.push_back({{"role", "tool"}, {"tool_call_id", message["tool_calls"][0]["id"]}, {"content", "{\"sky\":\"clear\"}"}});
  auto second = post_json(h.port, "/v1/chat/completions", {{"model", "tiny"}, {"messages", messages}, {"tools", tools}});
  ASSERT_EQ(second.status, 200u) << second.body;
  EXPECT_EQ(json::parse(second.body)["choices"][0]["message"]["content"], "It is sunny in Paris.");
}

TEST(Server, ResponsesApiSubset) {
  ServerHarness h(std::make_shared<testing::ScriptedRunner>(harmony_reply));
  auto r = post_json(h.port, "/v1/responses",
                     {{"model", "tiny"}, {"input", "Hi"}, {"instructions", "Be brief."}, {"reasoning", {{"effort", "high"}}}});
  ASSERT_EQ(r.status, 200u) << r.body;
  json body = json::parse(r.body);
  EXPECT_EQ(body["status"], "completed");
  ASSERT_EQ(body["output"].size(), 2u);
  EXPECT_EQ(body["output"][0]["type"], "reasoning");
  EXPECT_EQ(body["output"][1]["content"][0]["text"], "Hello! How can I help?");
  auto s = post_json(h.port, "/v1/responses", {{"model", "tiny"}, {"input", "Hi"}, {"stream", true}});
  std::string text;
  std::vector<std::string> types;
  for (const auto& e : testing::sse_data(s.body)) {
    json event = json::parse(e);
    types.push_back(event["type"]);
    if (event["type"] == "response.output_text.delta") text += event["delta"].get<std::string>();
  }
  EXPECT_EQ(types.front(), "response.created");
  EXPECT_EQ(types.back(), "response.completed");
  EXPECT_EQ(text, "Hello! How can I help?");
}

TEST(Server, BadRequestsGetOpenAiErrorsWithTheRightStatus) {
  server::ServerOptions options;
  options.http.max_body_bytes = 4096;
  ServerHarness h(tiny_runner(), options);
  expect_error(testing::http_request(h.port, "POST", "/v1/chat/completions", "{not json"), 400, "not valid JSON");
  expect_error(post_json(h.port, "/v1/chat/completions", {{"model", "tiny"}, {"messages", "hi"}}), 400, "messages");
  expect_error(post_json(h.port, "/v1/chat/completions",
                         {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}, {"temperature", "hot"}}),
               400, "temperature");
  expect_error(post_json(h.port, "/v1/chat/completions", {{"model", "gpt-5"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}}),
               404, "gpt-5");
  expect_error(post_json(h.port, "/v1/completions", {{"model", "tiny"}, {"prompt", {1, 2}}, {"max_tokens", 0}}), 400, "max_tokens");
  expect_error(post_json(h.port, "/v1/completions", {{"model", "tiny"}, {"prompt", {1, 2}}, {"max_tokens", 100000000}}), 400,
               "max_tokens");
  expect_error(post_json(h.port, "/v1/completions", {{"model", "tiny"}, {"prompt", std::vector<int>(5000, 7)}}), 413, "too large");
  expect_error(post_json(h.port, "/v1/completions", {{"model", "tiny"}, {"prompt", {1, 300000}}}), 400, "vocabulary");
  expect_error(post_json(h.port, "/v1/chat/completions",
                         {{"model", "tiny"}, {"messages", {{{"role", "wizard"}, {"content", "x"}}}}}),
               400, "unknown role");
  expect_error(post_json(h.port, "/v1/responses", {{"model", "tiny"}, {"input", "x"}, {"n", 3}}), 400,
               "'n' must be 1 on the Responses API", "n");
  // Still healthy afterwards.
  EXPECT_EQ(testing::http_request(h.port, "GET", "/health").status, 200u);
}

TEST(Server, PromptLongerThanTheContextIs400) {
  EngineConfig small;
  small.num_kv_blocks = 8;  // 16-token blocks: far less than the 2,000-token prompt needs
  ServerHarness h(tiny_runner(), {}, small);
  expect_error(post_json(h.port, "/v1/completions", {{"model", "tiny"}, {"prompt", std::vector<int>(2000, 7)}}), 400,
               "limit for prompt plus output");
}

TEST(Server, ApiKeyIsRequiredWhenSet) {
  server::ServerOptions options;
  options.api_key = "sekret";
  ServerHarness h(tiny_runner(), options);
  expect_error(testing::http_request(h.port, "GET", "/v1/models"), 401, "missing API key");
  expect_error(testing::http_request(h.port, "GET", "/v1/models", "", {{"Authorization", "Bearer wrong"}}), 401,
               "incorrect API key");
  EXPECT_EQ(testing::http_request(h.port, "GET", "/v1/models", "", {{"Authorization", "Bearer sekret"}}).status, 200u);
  EXPECT_EQ(testing::http_request(h.port, "GET", "/health").status, 200u);
}

TEST(Server, FullQueueGets429WithRetryAfter) {
  server::ServerOptions options;
  options.max_in_flight = 1;
  ServerHarness h(tiny_runner(), options);
  std::thread slow([&] {
    post_json(h.port, "/v1/completions", {{"model", "tiny"}, {"prompt", {1, 2, 3}}, {"max_tokens", 400}, {"ignore_eos", true}});
  });
  while (h.engine->in_flight() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto r = post_json(h.port, "/v1/completions", {{"model", "tiny"}, {"prompt", {1, 2, 3}}});
  expect_error(r, 429, "limit");
  EXPECT_EQ(r.headers["retry-after"], "1");
  slow.join();
}

TEST(Server, DisconnectingClientCancelsItsRequestAndFreesItsKv) {
  ServerHarness h(tiny_runner());
  {
    boost::asio::io_context ioc;
    boost::asio::ip::tcp::socket socket(ioc);
    socket.connect({boost::asio::ip::make_address("127.0.0.1"), h.port});
    const std::string body = json{{"model", "tiny"}, {"prompt", {1, 2, 3}}, {"max_tokens", 5000}, {"ignore_eos", true},
                                  {"stream", true}}.dump();
    const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body;
    boost::asio::write(socket, boost::asio::buffer(request));
    char buffer[512];
    socket.read_some(boost::asio::buffer(buffer));  // the stream has started
  }  // closed mid-stream
  // The engine publishes its metrics after the step in which the request ended, so wait for both.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  const auto settled = [&] {
    const auto m = h.engine->metrics();
    const auto cancelled = m.finished.find(FinishReason::cancelled);
    return h.engine->in_flight() == 0 && cancelled != m.finished.end() && cancelled->second == 1 &&
           m.kv_blocks_in_use == 0;
  };
  while (!settled() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(h.engine->in_flight(), 0);
  auto m = h.engine->metrics();
  EXPECT_EQ(m.finished[FinishReason::cancelled], 1u);
  EXPECT_EQ(m.kv_blocks_in_use, 0);
}

TEST(Server, RawSocketAbuseNeverHangsOrCrashes) {
  server::ServerOptions options;
  options.http.request_timeout = std::chrono::milliseconds(500);
  options.http.max_body_bytes = 1024;
  ServerHarness h(tiny_runner(), options);
  // Malformed request line and headers: 400, connection closed.
  EXPECT_NE(testing::raw_exchange(h.port, "GARBAGE\r\n\r\n", 5000).find("400"), std::string::npos);
  EXPECT_NE(testing::raw_exchange(h.port, "POST /v1/completions HTTP/1.1\r\nContent-Length: nope\r\n\r\n", 5000).find("400"),
            std::string::npos);
  // Declared body over the limit: 413 before the body is read.
  EXPECT_NE(testing::raw_exchange(h.port, "POST /v1/completions HTTP/1.1\r\nContent-Length: 999999\r\n\r\n", 5000).find("413"),
            std::string::npos);
  // A request trickled byte by byte and abandoned gets 408 at the request timeout, then the connection closes.
  {
    boost::asio::io_context ioc;
    boost::asio::ip::tcp::socket socket(ioc);
    socket.connect({boost::asio::ip::make_address("127.0.0.1"), h.port});
    const std::string partial = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
    for (char c : partial) {
      boost::asio::write(socket, boost::asio::buffer(&c, 1));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const auto start = std::chrono::steady_clock::now();
    std::string reply;
    char buffer[256];
    boost::system::error_code ec;
    while (!ec) reply.append(buffer, socket.read_some(boost::asio::buffer(buffer), ec));  // until the server closes
    EXPECT_TRUE(ec == boost::asio::error::eof || ec == boost::asio::error::connection_reset) << ec.message();
    EXPECT_NE(reply.find(" 408 "), std::string::npos) << reply;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  }
  // A thousand connections opened and dropped.
  {
    boost::asio::io_context ioc;
    std::vector<boost::asio::ip::tcp::socket> sockets;
    for (int i = 0; i < 1000; ++i) {
      sockets.emplace_back(ioc);
      sockets.back().connect({boost::asio::ip::make_address("127.0.0.1"), h.port});
    }
    sockets.clear();
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (h.server->draining() == false && std::chrono::steady_clock::now() < deadline &&
         testing::http_request(h.port, "GET", "/health").status != 200)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(testing::http_request(h.port, "GET", "/health").status, 200u);
}

TEST(Server, OfficialOpenAiNodeClientWorksUnchanged) {
  ServerHarness h(std::make_shared<testing::ScriptedRunner>(harmony_reply));
  const std::string script = std::string(MOESERVE_SOURCE_DIR) + "/tests/server/openai_client.mjs";
  auto result = testing::run_command("node " + script + " " + std::to_string(h.port));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  json report = json::parse(result.output.substr(result.output.find('{')));
  EXPECT_EQ(report["chat"]["content"], "Hello! How can I help?");
  EXPECT_EQ(report["chat"]["reasoning_content"], "The user greets me.");
  EXPECT_EQ(report["chat_stream"]["content"], "Hello! How can I help?");
  EXPECT_EQ(report["chat_stream"]["reasoning_content"], "The user greets me.");
  EXPECT_GT(report["chat_stream"]["usage"]["total_tokens"].get<int>(), 0);
  EXPECT_EQ(report["tool"]["name"], "get_weather");
  EXPECT_EQ(report["tool"]["arguments"], "{\"city\":\"Paris\"}");
  EXPECT_EQ(report["tool"]["answer"], "It is sunny in Paris.");
  auto reply = harmony_reply({});
  EXPECT_EQ(report["completions"]["token_ids"], std::vector<int32_t>(reply.begin(), reply.begin() + 10));
  EXPECT_EQ(report["responses"]["output_text"], "Hello! How can I help?");
  EXPECT_EQ(report["models"][0], "tiny");
}

}  // namespace
}  // namespace moeserve

namespace moeserve {
namespace {

// `moeserve serve` as users run it: started as a process, driven over HTTP, stopped with SIGTERM while a request
// is in flight. The request still completes, and the process exits 0.
TEST(ServeCommand, SigtermDrainsInFlightRequestsAndExitsZero) {
  const std::string dir = testing::temp_dir("serve");
  auto made = testing::run_command(std::string(MOESERVE_BINARY) + " make-tiny --out " + dir + "/model");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  testing::ServeProcess serve({"--model", dir + "/model", "--threads", "1"});
  const uint16_t port = serve.port();
  ASSERT_NE(port, 0) << "serve did not start:\n" << serve.log();
  // Chat: the same prompt as `moeserve generate --prompt`, greedy; the random model's output is not Harmony, so
  // both show it as plain text.
  auto chat = post_json(port, "/v1/chat/completions",
                        {{"model", "model"}, {"messages", {{{"role", "user"}, {"content", "What is 2+2?"}}}},
                         {"reasoning_effort", "low"}, {"temperature", 0}, {"max_tokens", 8}});
  ASSERT_EQ(chat.status, 200u) << chat.body;
  auto generated_chat = testing::run_command(std::string(MOESERVE_BINARY) + " generate --model " + dir +
                                             "/model --temperature 0 --max-tokens 8 --reasoning low --prompt 'What is 2+2?'");
  const std::string& out = generated_chat.output;
  const size_t text_at = out.find("its text: ");
  ASSERT_NE(text_at, std::string::npos) << out;
  EXPECT_EQ(out.substr(text_at + 10, out.find("\nprefill ") - text_at - 10),
            json::parse(chat.body)["choices"][0]["message"]["content"].get<std::string>());
  const std::vector<int32_t> prompt = {200006, 1428, 200008, 17, 200007, 200006, 173781};
  testing::HttpResult result;
  std::thread request([&] {
    result = post_json(port, "/v1/completions",
                       {{"model", "model"}, {"prompt", prompt}, {"max_tokens", 200}, {"temperature", 0}, {"ignore_eos", true}});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the request is in flight
  const int status = serve.terminate_and_wait();
  request.join();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  ASSERT_EQ(result.status, 200u) << result.body;
  const auto ids = json::parse(result.body)["choices"][0]["token_ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(ids.size(), 200u);
  // The same greedy tokens as `moeserve generate`.
  std::string list;
  for (int32_t t : prompt) list += (list.empty() ? "" : ",") + std::to_string(t);
  auto generated = testing::run_command(std::string(MOESERVE_BINARY) + " generate --model " + dir +
                                        "/model --temperature 0 --ignore-eos --max-tokens 200 --tokens " + list);
  ASSERT_EQ(generated.exit_code, 0) << generated.output;
  std::string expected;
  for (int32_t t : ids) expected += (expected.empty() ? "" : ",") + std::to_string(t);
  EXPECT_NE(generated.output.find(expected + "\n"), std::string::npos) << generated.output;
}

}  // namespace
}  // namespace moeserve
