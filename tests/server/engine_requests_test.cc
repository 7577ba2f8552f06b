// Request bodies to engine requests without a server (server/engine_requests.h): the depth limit, checked
// fields named by their path, token ids, the request limits, unsupported parameters, seeds. Every refusal must be
// an ApiError (never another exception) with the status, message and parameter a client can act on.
#include "server/engine_requests.h"
#include "server/structured_outputs.h"

#include <gtest/gtest.h>

#include <atomic>

#include "server/server_harness.h"

namespace moeserve::server {
namespace {

using nlohmann::json;

struct Context {
  std::atomic<uint64_t> draws{0};
  RequestContext ctx{*testing::tokenizer(), "m", 201088, 4096, {200002}, RequestLimits{},
                     [this] { return 1000 + draws++; }, nullptr};
};

const json kUser = json::array({{{"role", "user"}, {"content", "Hi"}}});

json chat(json extra = json::object()) {
  json body = {{"model", "m"}, {"messages", kUser}};
  body.update(extra);
  return body;
}
json completion(json extra = json::object()) {
  json body = {{"model", "m"}, {"prompt", "Hi"}};
  body.update(extra);
  return body;
}
json responses(json extra = json::object()) {
  json body = {{"model", "m"}, {"input", "Hi"}};
  body.update(extra);
  return body;
}

enum class Api { chat, completions, responses };

// The ApiError a body gets (in a context of its own unless given one), or a failure when it is accepted or throws
// something else.
ApiError refusal(Api api, const std::string& body, const RequestContext* given = nullptr) {
  Context c;
  const RequestContext& ctx = given ? *given : c.ctx;
  try {
    switch (api) {
      case Api::chat: chat_request(body, ctx); break;
      case Api::completions: completion_request(body, ctx); break;
      case Api::responses: responses_request(body, ctx); break;
    }
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body.substr(0, 300);
  return ApiError(0, "");
}

void expect_refused(Api api, const json& body, const std::string& fragment, const std::string& param,
                    unsigned status = 400, const RequestContext* ctx = nullptr) {
  const ApiError e = refusal(api, body.dump(), ctx);
  EXPECT_EQ(e.status(), status) << body.dump().substr(0, 300);
  EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  EXPECT_EQ(e.to_json()["error"]["param"], param.empty() ? json(nullptr) : json(param)) << e.what();
}

std::string nested(const std::string& open, const std::string& close, size_t levels, const std::string& inside = "") {
  std::string s;
  s.reserve(levels * (open.size() + close.size()) + inside.size());
  for (size_t i = 0; i < levels; ++i) s += open;
  s += inside;
  for (size_t i = 0; i < levels; ++i) s += close;
  return s;
}

TEST(EngineRequests, JsonNestedAMillionDeepIsRefusedAnywhere) {
  const std::string deep_list = nested("[", "]", 1'000'000);
  const std::string deep_object = nested("{\"a\":", "}", 1'000'000, "1");
  for (const std::string& deep : {deep_list, deep_object}) {
    for (const auto& [api, body] : std::vector<std::pair<Api, std::string>>{
             {Api::chat, R"({"model":"m","messages":)" + deep + "}"},
             {Api::chat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":)" + deep + "}"},
             {Api::responses, R"({"model":"m","input":)" + deep + "}"},
             {Api::completions, R"({"model":"m","prompt":)" + deep + "}"}}) {
      const ApiError e = refusal(api, body);
      EXPECT_EQ(e.status(), 400u);
      EXPECT_STREQ(e.what(), "request JSON nested deeper than 64 levels");
    }
  }
}

TEST(EngineRequests, DepthLimitIsSixtyFourLevelsIncludingToolSchemas) {
  // The body is level 1, tools 2, the tool 3, function 4; then each schema level is two (the schema and its
  // properties), from the parameters at 5; then the leaf.
  auto with_schema = [](size_t levels, const std::string& leaf) {
    return R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":)"
           R"({"name":"f","parameters":)" +
           nested(R"({"type":"object","properties":{"p":)", "}}", levels, leaf) + "}}]}";
  };
  Context c;
  EXPECT_NO_THROW(chat_request(with_schema(29, "[{}]"), c.ctx));  // 4 + 58 + 2 = 64 levels
  EXPECT_STREQ(refusal(Api::chat, with_schema(29, "[[{}]]")).what(), "request JSON nested deeper than 64 levels");
}

TEST(EngineRequests, WrongTypesNameTheFieldPath) {
  const std::vector<std::tuple<Api, json, std::string, std::string>> cases = {
      {Api::chat, chat({{"tools", {{{"type", 1}}}}}), "'tools[0].type' must be a string", "tools[0].type"},
      {Api::chat, chat({{"tools", {nullptr}}}), "'tools[0].type' is required", "tools[0].type"},
      {Api::chat, chat({{"tools", {json::array({1})}}}), "'tools[0]' must be an object", "tools[0]"},
      {Api::chat, chat({{"tools", {{{"type", "code_interpreter"}}}}}), "only tools of type 'function'", "tools[0].type"},
      {Api::chat, chat({{"tools", {{{"type", "function"}, {"function", {{"name", 7}}}}}}}),
       "'tools[0].function.name' must be a string", "tools[0].function.name"},
      {Api::chat, chat({{"tools", "all"}}), "'tools' must be a list", "tools"},
      {Api::chat, chat({{"messages", {{{"role", nullptr}}}}}), "'messages[0].role' is required", "messages[0].role"},
      {Api::chat, chat({{"messages", {{{"role", 5}}}}}), "'messages[0].role' must be a string", "messages[0].role"},
      {Api::chat, chat({{"messages", {"hello"}}}), "'messages[0]' must be an object", "messages[0]"},
      {Api::chat, chat({{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", 3}}}}}}}}),
       "'messages[0].content[0].text' must be a string", "messages[0].content[0].text"},
      {Api::chat, chat({{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}}),
       "only text parts are supported", "messages[0].content[0].type"},
      {Api::chat,
       chat({{"messages", {{{"role", "assistant"}, {"tool_calls", {{{"id", 5}, {"function", {{"name", "f"}}}}}}}}}}),
       "'messages[0].tool_calls[0].id' must be a string", "messages[0].tool_calls[0].id"},
      {Api::chat, chat({{"messages", {{{"role", "assistant"}, {"tool_calls", {{{"function", "f"}}}}}}}}),
       "'messages[0].tool_calls[0].function' must be an object", "messages[0].tool_calls[0].function"},
      {Api::chat, chat({{"reasoning", "high"}}), "'reasoning' must be an object", "reasoning"},
      {Api::chat, chat({{"stream_options", true}}), "'stream_options' must be an object", "stream_options"},
      {Api::chat, chat({{"stop", {1}}}), "'stop[0]' must be a string", "stop[0]"},
      {Api::chat, chat({{"seed", 1.5}}), "'seed' must be an integer", "seed"},
      {Api::chat, chat({{"model", nullptr}}), "'model' is required", "model"},
      {Api::responses, responses({{"input", {{{"type", 1}}}}}), "'input[0].type' must be a string", "input[0].type"},
      {Api::responses, responses({{"input", {7}}}), "'input[0]' must be an object", "input[0]"},
      {Api::responses, responses({{"tools", {{{"type", 2}}}}}), "'tools[0].type' must be a string", "tools[0].type"},
      {Api::responses, responses({{"input", {{{"type", "function_call"}, {"name", "f"}, {"call_id", 3}}}}}),
       "'input[0].call_id' must be a string", "input[0].call_id"},
      {Api::responses, responses({{"input", nullptr}}), "'input' is required", "input"},
      {Api::completions, completion({{"prompt", {"a", 5}}}), "'prompt[1]' must be a string, a list of token ids",
       "prompt[1]"},
      {Api::completions, completion({{"stream", "yes"}}), "'stream' must be a boolean", "stream"},
  };
  for (const auto& [api, body, fragment, param] : cases) expect_refused(api, body, fragment, param);
}

TEST(EngineRequests, TokenIdsMustBeIntegersInsideTheVocabulary) {
  const std::vector<json> bad = {json(uint64_t{1} << 32 | 5), json(uint64_t{1} << 63), json(INT64_MIN), json(-1),
                                 json(201088), json(1.5), json("7"), json(nullptr)};
  for (const json& id : bad) {
    expect_refused(Api::completions, completion({{"prompt", {1, 2, id}}}), "a token id must be an integer from 0 to 201087",
                   "prompt[2]");
    expect_refused(Api::completions, completion({{"prompt", {{1}, {2, id}}}}), "the model's vocabulary", "prompt[1][1]");
  }
  Context c;
  EXPECT_EQ(completion_request(completion({{"prompt", {0, 201087}}}).dump(), c.ctx).specs.at(0).prompt,
            (std::vector<TokenId>{0, 201087}));
}

TEST(EngineRequests, LimitsOnToolsMessagesSchemasAndText) {
  json tools = json::array();
  for (int i = 0; i < 129; ++i) tools.push_back({{"type", "function"}, {"function", {{"name", "f" + std::to_string(i)}}}});
  expect_refused(Api::chat, chat({{"tools", tools}}), "'tools' has 129 items; at most 128", "tools");
  tools.erase(tools.end() - 1);
  Context c;
  EXPECT_NO_THROW(chat_request(chat({{"tools", tools}}).dump(), c.ctx));

  json messages = json::array();
  for (int i = 0; i < 4097; ++i) messages.push_back({{"role", "user"}, {"content", "x"}});
  expect_refused(Api::chat, chat({{"messages", messages}}), "'messages' has 4097 items; at most 4096", "messages");
  // Tool calls are turns too.
  json calls = json::array();
  for (int i = 0; i < 4096; ++i) calls.push_back({{"id", "c"}, {"function", {{"name", "f"}}}});
  expect_refused(Api::chat, chat({{"messages", {{{"role", "assistant"}, {"tool_calls", calls}}}}}),
                 "makes the conversation longer than 4096 messages", "messages[0].tool_calls[4095]");

  const json big_schema = {{"type", "object"}, {"description", std::string(200 << 10, 'd')}};
  expect_refused(Api::chat,
                 chat({{"tools", {{{"type", "function"}, {"function", {{"name", "a"}, {"parameters", big_schema}}}},
                                  {{"type", "function"}, {"function", {{"name", "b"}, {"parameters", big_schema}}}}}}}),
                 "brings the tools' parameter schemas past 262144 bytes", "tools[1].function.parameters");

  const std::string five_mib(5 << 20, 'x');
  expect_refused(Api::chat, chat({{"messages", {{{"role", "user"}, {"content", five_mib}}, {{"role", "user"}, {"content", five_mib}}}}}),
                 "takes the request's text past 8388608 bytes", "messages[1].content");
  expect_refused(Api::completions, completion({{"prompt", {five_mib, five_mib}}}), "takes the request's text past",
                 "prompt[1]");
  expect_refused(Api::chat, chat({{"stop", std::string(257, 's')}}), "'stop' has 257 bytes; at most 256", "stop");
  expect_refused(Api::chat, chat({{"stop", {"a", "b", "c", "d", "e"}}}), "at most 4 are allowed", "stop");
}

TEST(EngineRequests, UnsupportedParametersAre400UnlessNeutral) {
  const std::vector<std::tuple<std::string, json, json>> parameters = {
      {"response_format", {{"type", "json_object"}}, {{"type", "text"}}},
      {"best_of", 2, 1},
      {"suffix", "end", ""},
      {"store", true, false},
      {"previous_response_id", "resp_1", nullptr},
      {"functions", {{{"name", "f"}}}, json::array()},
  };
  for (const auto& [name, asks, neutral] : parameters) {
    for (const Api api : {Api::chat, Api::completions, Api::responses}) {
      const json base = api == Api::chat ? chat() : api == Api::completions ? completion() : responses();
      json refused = base, accepted = base, null = base;
      refused[name] = asks;
      accepted[name] = neutral;
      null[name] = nullptr;
      expect_refused(api, refused, "'" + name + "' is not supported", name);
      Context c;
      for (const json& body : {accepted, null}) {
        switch (api) {
          case Api::chat: EXPECT_NO_THROW(chat_request(body.dump(), c.ctx)) << body.dump(); break;
          case Api::completions: EXPECT_NO_THROW(completion_request(body.dump(), c.ctx)) << body.dump(); break;
          case Api::responses: EXPECT_NO_THROW(responses_request(body.dump(), c.ctx)) << body.dump(); break;
        }
      }
    }
  }
  // The Responses API has no per-token logprobs here.
  expect_refused(Api::responses, responses({{"top_logprobs", 2}}), "'top_logprobs' is not supported", "top_logprobs");
  expect_refused(Api::responses,
                 responses({{"include", {"reasoning.encrypted_content", "message.output_text.logprobs"}}}),
                 "returns no logprobs", "include[1]");
  // text.format without a grammar cache (structured outputs below): refused, {"type": "text"} aside.
  expect_refused(Api::responses, responses({{"text", {{"format", {{"type", "json_object"}}}}}}),
                 "no constrained decoding", "text.format");
  Context c;
  EXPECT_NO_THROW(responses_request(responses({{"text", {{"format", {{"type", "text"}}}}}}).dump(), c.ctx));
}

TEST(EngineRequests, SamplingParametersBecomeTheEngineRequestsLogitsProcessing) {
  Context c;
  for (const Api api : {Api::chat, Api::completions, Api::responses}) {
    const json fields = {{"presence_penalty", 0.5}, {"frequency_penalty", -1}, {"repetition_penalty", 1.25},
                         {"logit_bias", {{"50256", -100}, {"7", 2.5}}}, {"min_tokens", 3}, {"max_tokens", 9},
                         {"stop_token_ids", {13, 14}}};
    const json body = api == Api::chat ? chat(fields) : api == Api::completions ? completion(fields) : responses(fields);
    const RequestSpec spec = api == Api::chat          ? chat_request(body.dump(), c.ctx).spec
                             : api == Api::completions ? completion_request(body.dump(), c.ctx).specs.at(0)
                                                       : responses_request(body.dump(), c.ctx).spec;
    EXPECT_FLOAT_EQ(spec.processing.presence_penalty, 0.5f);
    EXPECT_FLOAT_EQ(spec.processing.frequency_penalty, -1.0f);
    EXPECT_FLOAT_EQ(spec.processing.repetition_penalty, 1.25f);
    EXPECT_EQ(spec.processing.logit_bias, (std::vector<std::pair<int32_t, float>>{{7, 2.5f}, {50256, -100.0f}}));
    EXPECT_EQ(spec.processing.min_tokens, 3);
    ASSERT_GE(spec.stop_tokens.size(), 2u);
    EXPECT_EQ(std::vector<int32_t>(spec.stop_tokens.end() - 2, spec.stop_tokens.end()), (std::vector<int32_t>{13, 14}));
  }
  expect_refused(Api::chat, chat({{"logit_bias", {{"x", 1}}}}), "keys must be token ids", "logit_bias");
  expect_refused(Api::chat, chat({{"logit_bias", {{"201088", 1}}}}), "keys must be token ids", "logit_bias");
  expect_refused(Api::chat, chat({{"logit_bias", {{"5", 101}}}}), "between -100 and 100", "logit_bias.5");
  expect_refused(Api::chat, chat({{"presence_penalty", 2.5}}), "between -2 and 2", "presence_penalty");
  expect_refused(Api::chat, chat({{"repetition_penalty", 0}}), "greater than 0", "repetition_penalty");
  expect_refused(Api::completions, completion({{"stop_token_ids", {201088}}}), "between 0 and 201087",
                 "stop_token_ids[0]");
  expect_refused(Api::completions, completion({{"max_tokens", 8}, {"min_tokens", 9}}), "above max_tokens",
                 "min_tokens");
  expect_refused(Api::completions, completion({{"min_tokens", 4}, {"stop", "x"}}),
                 "not supported together with stop strings", "min_tokens");
  // ignore_eos (vLLM's): no stop tokens on any endpoint, unless stop_token_ids names some.
  EXPECT_TRUE(chat_request(chat({{"ignore_eos", true}}).dump(), c.ctx).spec.stop_tokens.empty());
  EXPECT_FALSE(chat_request(chat().dump(), c.ctx).spec.stop_tokens.empty());
  EXPECT_TRUE(completion_request(completion({{"ignore_eos", true}}).dump(), c.ctx).specs.at(0).stop_tokens.empty());
  EXPECT_EQ(chat_request(chat({{"ignore_eos", true}, {"stop_token_ids", {5}}}).dump(), c.ctx).spec.stop_tokens,
            std::vector<int32_t>{5});
}

TEST(EngineRequests, LogprobsAndEchoBecomeTheEngineRequestsLogprobs) {
  Context c;
  EXPECT_EQ(chat_request(chat().dump(), c.ctx).spec.top_logprobs, -1);
  EXPECT_EQ(chat_request(chat({{"logprobs", true}}).dump(), c.ctx).spec.top_logprobs, 0);
  EXPECT_EQ(chat_request(chat({{"logprobs", true}, {"top_logprobs", 20}}).dump(), c.ctx).spec.top_logprobs, 20);
  EXPECT_EQ(chat_request(chat({{"logprobs", false}, {"top_logprobs", 0}}).dump(), c.ctx).spec.top_logprobs, -1);
  expect_refused(Api::chat, chat({{"top_logprobs", 2}}), "needs 'logprobs' to be true", "top_logprobs");
  expect_refused(Api::chat, chat({{"logprobs", true}, {"top_logprobs", 21}}), "between 0 and 20", "top_logprobs");
  const CompletionRequest plain = completion_request(completion({{"logprobs", 3}}).dump(), c.ctx);
  EXPECT_EQ(plain.specs.at(0).top_logprobs, 3);
  EXPECT_FALSE(plain.specs.at(0).prompt_logprobs);
  const CompletionRequest echo =
      completion_request(completion({{"prompt", {1, 2, 3}}, {"logprobs", 1}, {"echo", true}}).dump(), c.ctx);
  EXPECT_TRUE(echo.echo);
  EXPECT_TRUE(echo.specs.at(0).prompt_logprobs);
  EXPECT_FALSE(completion_request(completion({{"prompt", {1, 2, 3}}, {"echo", true}}).dump(), c.ctx)
                   .specs.at(0).prompt_logprobs);
  expect_refused(Api::completions, completion({{"logprobs", 21}}), "between 0 and 20", "logprobs");
}

TEST(EngineRequests, ResponseFormatBecomesTheEngineRequestsGrammar) {
  Context c;
  structured::GrammarCache grammars(server::vocabulary_of(*testing::tokenizer(), 201088));
  c.ctx.grammars = &grammars;
  const json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}, {"required", {"a"}},
                       {"additionalProperties", false}};
  const json format = {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", schema}, {"strict", true}}}};
  const AssistantRequest a = chat_request(chat({{"response_format", format}}).dump(), c.ctx);
  ASSERT_TRUE(a.spec.grammar);
  EXPECT_EQ(a.spec.grammar_trigger, testing::encode("<|channel|>final<|message|>"));  // the final channel only
  EXPECT_EQ(a.spec.grammar, grammars.json_schema(schema));                           // compiled once
  const CompletionRequest p = completion_request(completion({{"response_format", format}}).dump(), c.ctx);
  EXPECT_EQ(p.specs.at(0).grammar, a.spec.grammar);
  EXPECT_TRUE(p.specs.at(0).grammar_trigger.empty());  // the whole completion
  EXPECT_TRUE(chat_request(chat({{"response_format", {{"type", "json_object"}}}}).dump(), c.ctx).spec.grammar);
  // The Responses API's text.format: name, schema and strict beside the type; the final channel only, as on chat.
  const json text_format = {{"type", "json_schema"}, {"name", "x"}, {"schema", schema}, {"strict", true}};
  const AssistantRequest r = responses_request(responses({{"text", {{"format", text_format}}}}).dump(), c.ctx);
  EXPECT_EQ(r.spec.grammar, a.spec.grammar);
  EXPECT_EQ(r.spec.grammar_trigger, a.spec.grammar_trigger);
  const json json_object = {{"text", {{"format", {{"type", "json_object"}}}}}};
  EXPECT_EQ(responses_request(responses(json_object).dump(), c.ctx).spec.grammar, grammars.json_object());
  expect_refused(Api::responses,
                 responses({{"text", {{"format", {{"type", "json_schema"}, {"name", "x"},
                                                  {"schema", {{"type", "string"}, {"pattern", "a"}}}}}}}}),
                 "'pattern'", "text.format.schema", 400, &c.ctx);
  EXPECT_FALSE(chat_request(chat({{"response_format", {{"type", "text"}}}}).dump(), c.ctx).spec.grammar);
  Context without;  // a server without a grammar cache refuses them
  EXPECT_THROW(chat_request(chat({{"response_format", format}}).dump(), without.ctx), ApiError);
  auto refused = [&](const json& body, const std::string& fragment, const std::string& param) {
    expect_refused(Api::chat, body, fragment, param, 400, &c.ctx);
  };
  json bad = format;
  bad["json_schema"]["schema"] = {{"type", "string"}, {"pattern", "a"}};
  refused(chat({{"response_format", bad}}), "'pattern'", "response_format.json_schema.schema");
  refused(chat({{"response_format", {{"type", "yaml"}}}}), "must be 'text', 'json_object'", "response_format.type");
  refused(chat({{"response_format", format}, {"min_tokens", 2}, {"max_tokens", 4}}), "cannot be combined",
          "min_tokens");
}

TEST(EngineRequests, ANamedOrRequiredToolIsACallWhoseArgumentsAreConstrained) {
  Context c;
  structured::GrammarCache grammars(server::vocabulary_of(*testing::tokenizer(), 201088));
  c.ctx.grammars = &grammars;
  const json parameters = {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}, {"required", {"city"}}};
  const json weather = {{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", parameters}}}};
  const json time = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
  const json named = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  const AssistantRequest a =
      chat_request(chat({{"tools", {weather, time}}, {"tool_choice", named}}).dump(), c.ctx);
  const auto header = testing::encode("<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>");
  EXPECT_EQ(a.primed, header);
  ASSERT_GE(a.spec.prompt.size(), header.size());
  EXPECT_EQ(std::vector<int32_t>(a.spec.prompt.end() - static_cast<std::ptrdiff_t>(header.size()), a.spec.prompt.end()),
            header);
  EXPECT_EQ(a.spec.grammar, grammars.json_schema(parameters));
  EXPECT_TRUE(a.spec.grammar_trigger.empty());
  EXPECT_EQ(a.spec.stop_tokens, std::vector<int32_t>{200012});  // <|call|>
  const AssistantRequest required = chat_request(chat({{"tools", {weather}}, {"tool_choice", "required"}}).dump(), c.ctx);
  EXPECT_EQ(required.primed, header);
  EXPECT_TRUE(chat_request(chat({{"tools", {weather}}, {"tool_choice", "auto"}}).dump(), c.ctx).primed.empty());
  expect_refused(Api::chat, chat({{"tools", {weather, time}}, {"tool_choice", "required"}}), "name the one to call",
                 "tool_choice");
  expect_refused(Api::chat, chat({{"tools", {weather}}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "x"}}}}}}),
                 "not one of the request's tools", "tool_choice.function.name");
  expect_refused(Api::responses, responses({{"tool_choice", "required"}}), "supported on chat completions",
                 "tool_choice");
}

TEST(EngineRequests, UnseededRequestsDrawASeedAndGivenSeedsAreKept) {
  Context c;
  EXPECT_EQ(chat_request(chat().dump(), c.ctx).spec.sampling.seed, 1000u);
  EXPECT_EQ(chat_request(chat().dump(), c.ctx).spec.sampling.seed, 1001u);
  EXPECT_EQ(chat_request(chat({{"seed", 5}}).dump(), c.ctx).spec.sampling.seed, 5u);
  EXPECT_EQ(chat_request(chat({{"seed", -1}}).dump(), c.ctx).spec.sampling.seed, UINT64_MAX);
  // Each prompt of a batch is a request of its own: its own draw, or the given seed for all.
  const CompletionRequest batch = completion_request(completion({{"prompt", {"a", "b"}}}).dump(), c.ctx);
  EXPECT_NE(batch.specs.at(0).sampling.seed, batch.specs.at(1).sampling.seed);
  const CompletionRequest seeded = completion_request(completion({{"prompt", {"a", "b"}}, {"seed", 9}}).dump(), c.ctx);
  EXPECT_EQ(seeded.specs.at(0).sampling.seed, 9u);
  EXPECT_EQ(seeded.specs.at(1).sampling.seed, 9u);
}

TEST(EngineRequests, ValidRequestsBecomeTheExpectedEngineRequests) {
  Context c;
  const AssistantRequest a = chat_request(
      chat({{"stream", true}, {"stream_options", {{"include_usage", true}}}, {"stop", {"x", ""}}, {"max_tokens", 7},
            {"temperature", 0.5}})
          .dump(),
      c.ctx);
  EXPECT_TRUE(a.stream);
  EXPECT_TRUE(a.include_usage);
  EXPECT_EQ(a.stops, std::vector<std::string>{"x"});
  EXPECT_EQ(a.spec.max_tokens, 7);
  EXPECT_FLOAT_EQ(a.spec.sampling.temperature, 0.5f);
  EXPECT_EQ(testing::tokenizer()->decode(a.spec.prompt).substr(0, 9), "<|start|>");
  const CompletionRequest r = completion_request(completion({{"prompt", {"Hello", {1, 2}}}}).dump(), c.ctx);
  ASSERT_EQ(r.specs.size(), 2u);
  EXPECT_EQ(r.specs[0].prompt, testing::encode("Hello"));
  EXPECT_EQ(r.specs[1].prompt, (std::vector<TokenId>{1, 2}));
  EXPECT_EQ(r.specs[0].max_tokens, 16);  // OpenAI's default for completions
  EXPECT_EQ(r.specs[0].stop_tokens, std::vector<TokenId>{200002});
  expect_refused(Api::completions, completion({{"max_tokens", 5000}}), "leaves room for", "max_tokens");
  expect_refused(Api::chat, chat({{"model", "other"}}), "does not exist", "model", 404);
}

}  // namespace
}  // namespace moeserve::server
