// The faults of issue 14 over HTTP, one test each: the server answers every bad request with a 4xx in OpenAI's
// shape, naming the field, and serves the next request as before. Also chat stop strings on output that is not
// Harmony.
#include <gtest/gtest.h>

#include "server/scripted_runner.h"
#include "server/server_harness.h"

namespace moeserve {
namespace {

using nlohmann::json;
using testing::expect_error;
using testing::post_json;
using testing::ServerHarness;

const json kUser = json::array({{{"role", "user"}, {"content", "Hi"}}});

// A chat request that must succeed after whatever came before it.
void expect_still_serving(const ServerHarness& h) {
  const auto r = post_json(h.port, "/v1/chat/completions",
                           {{"model", "tiny"}, {"messages", kUser}, {"max_tokens", 2}, {"temperature", 0}});
  EXPECT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(testing::http_request(h.port, "GET", "/health").status, 200u);
}

std::string deep(size_t levels) { return std::string(levels, '[') + std::string(levels, ']'); }

TEST(BadRequests, JsonNestedAMillionDeepIs400InChatToolsAndResponses) {
  ServerHarness h(testing::tiny_runner());
  const std::string million = deep(1'000'000);
  for (const auto& [route, body] : std::vector<std::pair<std::string, std::string>>{
           {"/v1/chat/completions", R"({"model":"tiny","messages":)" + million + "}"},
           {"/v1/chat/completions", R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"tools":)" + million + "}"},
           {"/v1/responses", R"({"model":"tiny","input":)" + million + "}"},
           {"/v1/responses",
            R"({"model":"tiny","input":"x","tools":[{"type":"function","name":"f","parameters":)" + million + "}]}"}}) {
    expect_error(testing::http_request(h.port, "POST", route, body), 400, "nested deeper than 64 levels");
    expect_still_serving(h);
  }
  // A tool schema nesting objects 2,000 deep (74 KB), which kept the I/O threads rendering.
  std::string schema = "{}";
  for (int i = 0; i < 2000; ++i) schema = R"({"type":"object","properties":{"p":)" + schema + "}}";
  expect_error(testing::http_request(h.port, "POST", "/v1/chat/completions",
                                     R"({"model":"tiny","messages":[{"role":"user","content":"x"}],)"
                                     R"("tools":[{"type":"function","function":{"name":"f","parameters":)" +
                                         schema + "}}]}"),
               400, "nested deeper than 64 levels");
  expect_still_serving(h);
}

TEST(BadRequests, WrongTypedFieldsAre400NamingThePath) {
  ServerHarness h(testing::tiny_runner());
  const std::vector<std::tuple<std::string, json, std::string>> cases = {
      {"/v1/chat/completions", {{"model", "tiny"}, {"messages", kUser}, {"tools", {{{"type", 1}}}}}, "tools[0].type"},
      {"/v1/chat/completions", {{"model", "tiny"}, {"messages", kUser}, {"tools", {nullptr}}}, "tools[0].type"},
      {"/v1/chat/completions", {{"model", "tiny"}, {"messages", kUser}, {"tools", {json::array()}}}, "tools[0]"},
      {"/v1/responses", {{"model", "tiny"}, {"input", {{{"type", 1}}}}}, "input[0].type"},
      {"/v1/chat/completions", {{"model", "tiny"}, {"messages", {{{"role", nullptr}}}}}, "messages[0].role"},
      {"/v1/responses", {{"model", "tiny"}, {"input", "x"}, {"tools", {{{"type", 2}}}}}, "tools[0].type"},
      {"/v1/chat/completions",
       {{"model", "tiny"},
        {"messages", {{{"role", "assistant"}, {"tool_calls", {{{"id", 1}, {"function", {{"name", "f"}}}}}}}}}},
       "messages[0].tool_calls[0].id"},
  };
  for (const auto& [route, body, param] : cases) {
    expect_error(post_json(h.port, route, body), 400, "'" + param + "'", param);
    expect_still_serving(h);
  }
}

TEST(BadRequests, TokenIdsOutsideTheVocabularyAre400NamingTheIndex) {
  ServerHarness h(testing::tiny_runner());
  for (const json& id : {json((uint64_t{1} << 32) + 5), json(uint64_t{1} << 63), json(INT64_MIN)}) {
    expect_error(post_json(h.port, "/v1/completions", {{"model", "tiny"}, {"prompt", {1, id}}}), 400, "vocabulary",
                 "prompt[1]");
    expect_still_serving(h);
  }
}

TEST(BadRequests, AThousandToolsOrMegabytesOfSpacesAreAnsweredWithoutRunningAway) {
  server::ServerOptions options;
  options.http.max_body_bytes = 16 << 20;
  ServerHarness h(testing::tiny_runner(), options);
  json tools = json::array();
  for (int i = 0; i < 1000; ++i) tools.push_back({{"type", "function"}, {"function", {{"name", "f" + std::to_string(i)}}}});
  expect_error(post_json(h.port, "/v1/chat/completions", {{"model", "tiny"}, {"messages", kUser}, {"tools", tools}}), 400,
               "at most 128", "tools");
  expect_still_serving(h);
  // 7.9 MB of spaces is tokenised whole (linear: the test's timeout bounds it); asking for more output than the
  // context leaves makes the answer a 400 right after tokenising, naming the prompt's length.
  const std::string spaces(static_cast<size_t>(7.9 * (1 << 20)), ' ');
  expect_error(post_json(h.port, "/v1/completions", {{"model", "tiny"}, {"prompt", spaces}, {"max_tokens", INT32_MAX}}),
               400, "-token prompt leaves room for", "max_tokens");
  expect_error(post_json(h.port, "/v1/chat/completions",
                         {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", spaces}}}}, {"max_tokens", INT32_MAX}}),
               400, "-token prompt leaves room for", "max_tokens");
  expect_still_serving(h);
}

TEST(BadRequests, UnsupportedParametersAre400AndNeutralValuesAreAccepted) {
  ServerHarness h(testing::tiny_runner());
  const json base = {{"model", "tiny"}, {"messages", kUser}, {"max_tokens", 2}};
  for (const auto& [name, value] : std::vector<std::pair<std::string, json>>{
           {"best_of", 2}, {"store", true}, {"functions", {{{"name", "f"}}}}}) {
    json body = base;
    body[name] = value;
    expect_error(post_json(h.port, "/v1/chat/completions", body), 400, "'" + name + "' is not supported", name);
  }
  json neutral = base;
  neutral.update({{"response_format", {{"type", "text"}}}, {"logit_bias", json::object()}, {"presence_penalty", 0},
                  {"frequency_penalty", 0}, {"best_of", 1}, {"store", false}, {"n", 1}, {"min_tokens", 0}});
  EXPECT_EQ(post_json(h.port, "/v1/chat/completions", neutral).status, 200u);
  expect_error(post_json(h.port, "/v1/responses",
                         {{"model", "tiny"}, {"input", "x"}, {"response_format", {{"type", "json_object"}}}}),
               400, "'response_format' is not supported", "response_format");
  expect_error(post_json(h.port, "/v1/completions", {{"model", "tiny"}, {"prompt", "x"}, {"suffix", "y"}}), 400,
               "'suffix' is not supported", "suffix");
  expect_error(post_json(h.port, "/v1/responses", {{"model", "tiny"}, {"input", "x"}, {"previous_response_id", "r"}}),
               400, "'previous_response_id' is 'r': no stored response has that id", "previous_response_id");
  expect_error(post_json(h.port, "/v1/responses",
                         {{"model", "tiny"}, {"input", "x"}, {"include", {"message.output_text.logprobs"}}}),
               400, "'include[0]' is not supported", "include[0]");
  expect_still_serving(h);
}

// A model that does not write Harmony: plain text, then more plain text, then <|return|>.
std::vector<int32_t> plain_reply(const std::vector<int32_t>&) {
  std::vector<int32_t> reply = testing::encode("Hello world STOP");
  for (int i = 0; i < 50; ++i) {
    const auto more = testing::encode(" and then some more words");
    reply.insert(reply.end(), more.begin(), more.end());
  }
  return reply;
}

TEST(BadRequests, ChatStopStringStopsOutputThatIsNotHarmony) {
  ServerHarness h(std::make_shared<testing::ScriptedRunner>(plain_reply));
  // The token that completes "STOP" is the last one generated.
  const size_t through_stop = testing::encode("Hello world STOP").size();
  const json request = {{"model", "tiny"}, {"messages", kUser}, {"stop", "STOP"}};
  const auto r = post_json(h.port, "/v1/chat/completions", request);
  ASSERT_EQ(r.status, 200u) << r.body;
  const json body = json::parse(r.body);
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Hello world ");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["usage"]["completion_tokens"], through_stop);

  json streaming = request;
  streaming["stream"] = true;
  const auto s = post_json(h.port, "/v1/chat/completions", streaming);
  std::string content, finish;
  for (const std::string& event : testing::sse_data(s.body)) {
    if (event == "[DONE]") continue;
    const json chunk = json::parse(event);
    const json& delta = chunk["choices"][0]["delta"];
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (!chunk["choices"][0]["finish_reason"].is_null()) finish = chunk["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(content, "Hello world ");
  EXPECT_EQ(finish, "stop");
  // Both requests were cancelled at the stop string: the engine generated nothing like the 250-token script.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (h.engine->in_flight() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_LT(h.engine->metrics().generated_tokens, 2 * (through_stop + 8));
}

}  // namespace
}  // namespace moeserve
