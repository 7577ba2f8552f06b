// The server's surface as OpenAI and vLLM clients meet it: the Responses API's full event stream (read back by
// the official openai npm client, tests/server/openai_responses_stream.mjs), model lookup, and the utility
// routes.
#include <gtest/gtest.h>

#include "server/http_client.h"
#include "server/scripted_runner.h"
#include "server/server_harness.h"
#include "test_util.h"

namespace moeserve {
namespace {

using nlohmann::json;
using testing::encode;
using testing::harmony_reply;
using testing::post_json;
using testing::ServerHarness;

std::vector<json> events_of(const testing::HttpResult& r) {
  std::vector<json> events;
  for (const auto& data : testing::sse_data(r.body)) events.push_back(json::parse(data));
  return events;
}

std::vector<std::string> types_of(const std::vector<json>& events) {
  std::vector<std::string> types;
  for (const json& e : events) types.push_back(e["type"]);
  return types;
}

TEST(ResponsesStream, SendsEveryEventOpenAiSendsInOrder) {
  ServerHarness h(std::make_shared<testing::ScriptedRunner>(harmony_reply));
  const auto events =
      events_of(post_json(h.port, "/v1/responses", {{"model", "tiny"}, {"input", "Hi"}, {"stream", true}}));
  std::vector<std::string> types = types_of(events);
  // Deltas come one per token: keep one of each run.
  types.erase(std::unique(types.begin(), types.end()), types.end());
  const std::vector<std::string> expected = {"response.created",
                                             "response.in_progress",
                                             "response.output_item.added",
                                             "response.content_part.added",
                                             "response.reasoning_text.delta",
                                             "response.reasoning_text.done",
                                             "response.content_part.done",
                                             "response.output_item.done",
                                             "response.output_item.added",
                                             "response.content_part.added",
                                             "response.output_text.delta",
                                             "response.output_text.done",
                                             "response.content_part.done",
                                             "response.output_item.done",
                                             "response.completed"};
  EXPECT_EQ(types, expected);
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i]["sequence_number"], i);
  const json& done = events.back()["response"];
  EXPECT_EQ(done["status"], "completed");
  ASSERT_EQ(done["output"].size(), 2u);
  EXPECT_EQ(done["output"][0]["content"][0]["text"], "The user greets me.");
  EXPECT_EQ(done["output"][1]["content"][0]["text"], "Hello! How can I help?");
  // Each item's events name its index and id; the added item is empty and the done item whole.
  for (const json& e : events) {
    if (e["type"] == "response.output_text.done") {
      EXPECT_EQ(e["output_index"], 1);
      EXPECT_EQ(e["item_id"], done["output"][1]["id"]);
      EXPECT_EQ(e["text"], "Hello! How can I help?");
    }
    if (e["type"] == "response.output_item.added") {
      EXPECT_TRUE(e["item"]["content"].empty()) << e;
    }
  }
}

TEST(ResponsesStream, CutOffByMaxOutputTokensEndsIncomplete) {
  ServerHarness h(std::make_shared<testing::ScriptedRunner>(harmony_reply));
  const json body = {{"model", "tiny"}, {"input", "Hi"}, {"max_output_tokens", 18}};
  auto plain = post_json(h.port, "/v1/responses", body);
  ASSERT_EQ(plain.status, 200u) << plain.body;
  EXPECT_EQ(json::parse(plain.body)["status"], "incomplete");
  EXPECT_EQ(json::parse(plain.body)["incomplete_details"]["reason"], "max_output_tokens");
  json streaming = body;
  streaming["stream"] = true;
  const auto events = events_of(post_json(h.port, "/v1/responses", streaming));
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["type"], "response.incomplete");
  EXPECT_EQ(events.back()["response"]["incomplete_details"]["reason"], "max_output_tokens");
  // The item being generated when the budget ran out is incomplete, streamed or not: here the message, after
  // "Hello! How".
  EXPECT_EQ(json::parse(plain.body)["output"].back()["content"][0]["text"], "Hello! How");
  EXPECT_EQ(events.back()["response"]["output"].size(), json::parse(plain.body)["output"].size());
  EXPECT_EQ(events.back()["response"]["output"].back()["status"], "incomplete");
  EXPECT_EQ(json::parse(plain.body)["output"].back()["status"], "incomplete");
}

TEST(ResponsesStream, FunctionCallsStreamAsTheirOwnItems) {
  ServerHarness h(std::make_shared<testing::ScriptedRunner>(harmony_reply));
  const json tool = {{"type", "function"},
                     {"name", "get_weather"},
                     {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}};
  const auto events = events_of(post_json(
      h.port, "/v1/responses", {{"model", "tiny"}, {"input", "Weather?"}, {"tools", {tool}}, {"stream", true}}));
  std::vector<std::string> types = types_of(events);
  types.erase(std::unique(types.begin(), types.end()), types.end());
  ASSERT_GE(types.size(), 5u);
  const std::vector<std::string> tail(types.end() - 5, types.end());
  EXPECT_EQ(tail, (std::vector<std::string>{"response.output_item.added", "response.function_call_arguments.delta",
                                            "response.function_call_arguments.done", "response.output_item.done",
                                            "response.completed"}));
  const json& call = events.back()["response"]["output"].back();
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(call["arguments"], "{\"city\":\"Paris\"}");
  EXPECT_EQ(call["call_id"].get<std::string>().rfind("call_", 0), 0u);
}

TEST(OpenAiNodeClient, ResponsesStreamFinalResponseAndModelsRetrieve) {
  ServerHarness h(std::make_shared<testing::ScriptedRunner>(harmony_reply));
  const std::string script = std::string(MOESERVE_SOURCE_DIR) + "/tests/server/openai_responses_stream.mjs";
  auto result = testing::run_command("node " + script + " " + std::to_string(h.port));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const json report = json::parse(result.output.substr(result.output.find('{')));
  const json& answer = report["answer"];
  EXPECT_EQ(answer["status"], "completed");
  EXPECT_EQ(answer["deltas"], "Hello! How can I help?");
  ASSERT_EQ(answer["output"].size(), 2u);
  EXPECT_EQ(answer["output"][0]["type"], "reasoning");
  EXPECT_EQ(answer["output"][0]["text"], "The user greets me.");
  EXPECT_EQ(answer["output"][1]["text"], "Hello! How can I help?");
  EXPECT_GT(answer["usage"]["output_tokens"].get<int>(), 0);
  // A cut-off stream ends with response.incomplete; the client's final response is then what it rebuilt from the
  // items' events (it takes the response object itself only from response.completed).
  const json& cut = report["cut_off"];
  EXPECT_EQ(cut["events"].back()["type"], "response.incomplete");
  EXPECT_EQ(cut["events"].back()["status"], "incomplete");
  EXPECT_EQ(cut["events"].back()["incomplete_details"]["reason"], "max_output_tokens");
  ASSERT_EQ(cut["output"].size(), 2u);
  EXPECT_EQ(cut["output"][1]["text"], "Hello! How");  // 18 tokens: the reasoning, a header, "Hello! How"
  EXPECT_EQ(cut["deltas"], "Hello! How");
  const json& tool = report["tool"];
  ASSERT_FALSE(tool["output"].empty());
  EXPECT_EQ(tool["output"].back()["type"], "function_call");
  EXPECT_EQ(tool["output"].back()["name"], "get_weather");
  EXPECT_EQ(tool["output"].back()["arguments"], "{\"city\":\"Paris\"}");
  EXPECT_EQ(report["followup"]["output_text"], "As I said: hello.");
  EXPECT_EQ(report["stored"]["output_text"], "Hello! How can I help?");
  EXPECT_EQ(report["model"]["id"], "tiny");
  EXPECT_EQ(report["model"]["object"], "model");
  EXPECT_EQ(report["unknown_model"]["not_found"], true);
  EXPECT_EQ(report["unknown_model"]["status"], 404);
  EXPECT_EQ(report["unknown_model"]["error"]["code"], "model_not_found");
  EXPECT_EQ(report["text_format"]["status"], "completed");
  EXPECT_EQ(report["text_format"]["output_text"], R"({"city":"Paris","sunny":true})");
  EXPECT_EQ(report["text_format"]["parsed"], json({{"city", "Paris"}, {"sunny", true}}));
  EXPECT_EQ(report["text_format_broken"]["status"], 500);
  EXPECT_NE(report["text_format_broken"]["message"].get<std::string>().find("outside the grammar"), std::string::npos)
      << report["text_format_broken"];
}

TEST(ResponsesStore, PreviousResponseIdContinuesAStoredConversation) {
  ServerHarness h(std::make_shared<testing::ScriptedRunner>(harmony_reply));
  auto first = post_json(h.port, "/v1/responses", {{"model", "tiny"}, {"input", "Hi"}});
  ASSERT_EQ(first.status, 200u) << first.body;
  const std::string id = json::parse(first.body)["id"];
  auto second =
      post_json(h.port, "/v1/responses", {{"model", "tiny"}, {"input", "Go on."}, {"previous_response_id", id}});
  ASSERT_EQ(second.status, 200u) << second.body;
  EXPECT_EQ(json::parse(second.body)["output"].back()["content"][0]["text"], "As I said: hello.");
  // The stored conversation holds both turns: a third request sees the first answer still.
  const std::string second_id = json::parse(second.body)["id"];
  auto third =
      post_json(h.port, "/v1/responses",
                {{"model", "tiny"}, {"input", "More?"}, {"previous_response_id", second_id}, {"stream", true}});
  EXPECT_NE(third.body.find("As I said: hello."), std::string::npos) << third.body;
  auto got = testing::http_request(h.port, "GET", "/v1/responses/" + id);
  ASSERT_EQ(got.status, 200u);
  EXPECT_EQ(json::parse(got.body), json::parse(first.body));
  testing::expect_error(
      post_json(h.port, "/v1/responses", {{"model", "tiny"}, {"input", "x"}, {"previous_response_id", "resp_nope"}}),
      400, "no stored response has that id", "previous_response_id");
  EXPECT_EQ(testing::http_request(h.port, "GET", "/v1/responses/resp_nope").status, 404u);
  // store: false keeps nothing.
  auto unstored = post_json(h.port, "/v1/responses", {{"model", "tiny"}, {"input", "Hi"}, {"store", false}});
  ASSERT_EQ(unstored.status, 200u);
  EXPECT_EQ(testing::http_request(h.port, "GET", "/v1/responses/" + json::parse(unstored.body)["id"].get<std::string>())
                .status,
            404u);
}

TEST(ResponsesStore, KeepsTheMostRecentlyUsed) {
  server::ServerOptions options;
  options.responses_store_size = 2;
  ServerHarness h(std::make_shared<testing::ScriptedRunner>(harmony_reply), options);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    auto r = post_json(h.port, "/v1/responses", {{"model", "tiny"}, {"input", "Hi"}});
    ASSERT_EQ(r.status, 200u);
    ids.push_back(json::parse(r.body)["id"]);
    if (i == 1) {
      EXPECT_EQ(testing::http_request(h.port, "GET", "/v1/responses/" + ids[0]).status, 200u);  // used
    }
  }
  // Three stored into two places: the least recently used (the second) went.
  EXPECT_EQ(testing::http_request(h.port, "GET", "/v1/responses/" + ids[0]).status, 200u);
  EXPECT_EQ(testing::http_request(h.port, "GET", "/v1/responses/" + ids[1]).status, 404u);
  EXPECT_EQ(testing::http_request(h.port, "GET", "/v1/responses/" + ids[2]).status, 200u);
}

TEST(Routes, ModelById) {
  ServerHarness h(std::make_shared<testing::ScriptedRunner>(harmony_reply));
  auto found = testing::http_request(h.port, "GET", "/v1/models/tiny");
  ASSERT_EQ(found.status, 200u) << found.body;
  EXPECT_EQ(json::parse(found.body)["id"], "tiny");
  EXPECT_EQ(json::parse(found.body)["object"], "model");
  auto missing = testing::http_request(h.port, "GET", "/v1/models/gpt-4");
  testing::expect_error(missing, 404, "The model 'gpt-4' does not exist", "model");
  EXPECT_EQ(json::parse(missing.body)["error"]["code"], "model_not_found");
}

TEST(Routes, TokenizeAndDetokenizeInVllmsShapes) {
  ServerHarness h(std::make_shared<testing::ScriptedRunner>(harmony_reply));
  auto r = post_json(h.port, "/tokenize", {{"prompt", "Hello, world!"}, {"return_token_strs", true}});
  ASSERT_EQ(r.status, 200u) << r.body;
  const json tokenized = json::parse(r.body);
  const std::vector<int32_t> expected = encode("Hello, world!");
  EXPECT_EQ(tokenized["tokens"], expected);
  EXPECT_EQ(tokenized["count"], expected.size());
  EXPECT_EQ(tokenized["max_model_len"], h.engine->max_sequence_tokens());
  std::string joined;
  for (const auto& piece : tokenized["token_strs"]) joined += piece.get<std::string>();
  EXPECT_EQ(joined, "Hello, world!");
  // Without return_token_strs, vLLM answers null there.
  EXPECT_TRUE(json::parse(post_json(h.port, "/tokenize", {{"prompt", "Hi"}}).body)["token_strs"].is_null());
  // Messages are rendered as the chat request renders them: the count is its prompt_tokens.
  const json messages = {{{"role", "user"}, {"content", "Hi"}}};
  auto chat_tokens = post_json(h.port, "/tokenize", {{"model", "tiny"}, {"messages", messages}});
  ASSERT_EQ(chat_tokens.status, 200u) << chat_tokens.body;
  auto chat = post_json(h.port, "/v1/chat/completions", {{"model", "tiny"}, {"messages", messages}});
  ASSERT_EQ(chat.status, 200u) << chat.body;
  EXPECT_EQ(json::parse(chat_tokens.body)["count"], json::parse(chat.body)["usage"]["prompt_tokens"]);
  auto back = post_json(h.port, "/detokenize", {{"tokens", expected}});
  ASSERT_EQ(back.status, 200u) << back.body;
  EXPECT_EQ(json::parse(back.body)["prompt"], "Hello, world!");
  // Errors in OpenAI's shape, naming the field.
  testing::expect_error(post_json(h.port, "/detokenize", {{"tokens", {1, -5}}}), 400, "tokens[1]", "tokens[1]");
  testing::expect_error(post_json(h.port, "/detokenize", json::object()), 400, "is required", "tokens");
  testing::expect_error(post_json(h.port, "/tokenize", {{"model", "other"}, {"prompt", "x"}}), 404, "does not exist");
  testing::expect_error(post_json(h.port, "/tokenize", {{"prompt", 3}}), 400, "must be a string", "prompt");
  EXPECT_EQ(testing::http_request(h.port, "GET", "/tokenize").status, 405u);
}

TEST(Routes, Version) {
  ServerHarness h(std::make_shared<testing::ScriptedRunner>(harmony_reply));
  auto r = testing::http_request(h.port, "GET", "/version");
  ASSERT_EQ(r.status, 200u);
  EXPECT_FALSE(json::parse(r.body)["version"].get<std::string>().empty());
}

TEST(Routes, CorsForAllowedOriginsOnlyWithPreflightBeforeTheApiKey) {
  server::ServerOptions options;
  options.http.allowed_origins = {"https://app.example"};
  options.api_key = "secret";
  ServerHarness h(std::make_shared<testing::ScriptedRunner>(harmony_reply), options);
  auto preflight = testing::http_request(h.port, "OPTIONS", "/v1/chat/completions", {},
                                         {{"Origin", "https://app.example"},
                                          {"Access-Control-Request-Method", "POST"},
                                          {"Access-Control-Request-Headers", "authorization, content-type"}});
  EXPECT_EQ(preflight.status, 204u);
  EXPECT_EQ(preflight.headers["access-control-allow-origin"], "https://app.example");
  EXPECT_EQ(preflight.headers["access-control-allow-headers"], "authorization, content-type");
  EXPECT_NE(preflight.headers["access-control-allow-methods"].find("POST"), std::string::npos);
  // The actual request carries the header too (an error answer included), streaming or not.
  auto denied = testing::http_request(h.port, "GET", "/v1/models", {}, {{"Origin", "https://app.example"}});
  EXPECT_EQ(denied.status, 401u);
  EXPECT_EQ(denied.headers["access-control-allow-origin"], "https://app.example");
  auto stream = post_json(h.port, "/v1/responses", {{"model", "tiny"}, {"input", "Hi"}, {"stream", true}},
                          {{"Origin", "https://app.example"}, {"Authorization", "Bearer secret"}});
  EXPECT_EQ(stream.status, 200u);
  EXPECT_EQ(stream.headers["access-control-allow-origin"], "https://app.example");
  // Another origin gets no CORS headers, and its preflight is an ordinary request (no route takes OPTIONS).
  auto other = testing::http_request(h.port, "GET", "/health", {}, {{"Origin", "https://evil.example"}});
  EXPECT_EQ(other.status, 200u);
  EXPECT_FALSE(other.headers.contains("access-control-allow-origin"));
  auto other_preflight = testing::http_request(
      h.port, "OPTIONS", "/health", {}, {{"Origin", "https://evil.example"}, {"Access-Control-Request-Method", "GET"}});
  EXPECT_NE(other_preflight.status, 204u);
  EXPECT_FALSE(other_preflight.headers.contains("access-control-allow-origin"));
}

TEST(Routes, ServerWithoutItsEngineYetAnswers503ExceptVersion) {
  server::ServerOptions options;
  options.http.port = 0;
  server::OpenAiServer loading(testing::tokenizer(), options);
  loading.start();
  const uint16_t port = loading.port();
  auto health = testing::http_request(port, "GET", "/health");
  testing::expect_error(health, 503, "loading");
  testing::expect_error(post_json(port, "/v1/chat/completions", {{"model", "moeserve"}, {"messages", json::array()}}),
                        503, "loading");
  EXPECT_EQ(testing::http_request(port, "GET", "/v1/models").status, 503u);
  EXPECT_EQ(testing::http_request(port, "GET", "/version").status, 200u);
  EngineConfig config;
  config.num_kv_blocks = 64;
  loading.serve_engine(std::make_shared<Engine>(std::make_shared<testing::ScriptedRunner>(harmony_reply), config));
  EXPECT_EQ(testing::http_request(port, "GET", "/health").status, 200u);
  EXPECT_EQ(testing::http_request(port, "GET", "/v1/models").status, 200u);
  loading.shutdown();
}

}  // namespace
}  // namespace moeserve
