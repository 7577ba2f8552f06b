// The OpenAI server for a DeepSeek-R1 model: chat completions rendered with R1's template and read back as
// reasoning_content and content (streamed and not, with stop strings), completions with token ids equal to
// generate on the tiny DeepSeek-V3 model, the same greedy replies with the MTP head speculating, chat logprobs
// against the runner's logits, ignore_eos and stop_token_ids, and the requests R1 does not serve (tools,
// reasoning_effort, response_format, the Responses API) refused with 400.
#include <gtest/gtest.h>

#include "chat/r1_chat.h"
#include "deepseek_test_util.h"
#include "engine/generate.h"
#include "runner/cpu/deepseek_v3_runner.h"
#include "runner/cpu/mtp_drafter.h"
#include "server/http_client.h"
#include "server/scripted_runner.h"
#include "server/server_harness.h"
#include "sampling/logits_oracle.h"
#include "tokenizer/deepseek_tokenizer_test.h"

namespace moeserve {
namespace {

using nlohmann::json;
using testing::post_json;

std::shared_ptr<const Tokenizer> r1_tokenizer() {
  static std::shared_ptr<const Tokenizer> t = Tokenizer::from_file(testing::deepseek_r1_tokenizer_json());
  return t;
}

std::vector<int32_t> encode(const std::string& text) { return r1_tokenizer()->encode(text, AllowedSpecial::all()); }

const std::string kReply = "The user greets me.</think>Hello! How can I help?<｜end▁of▁sentence｜>";
const std::string kPastTheEnd = " Anything else?";

// R1 replies, scripted: reasoning, </think>, the answer, end of sentence, then more that only ignore_eos reaches
// (past it the runner emits end of sentence). The prompt must be R1's template.
std::vector<int32_t> r1_reply(const std::vector<int32_t>& prompt) {
  const std::string expected = chat::render_r1_text(
      std::vector<chat::ChatTurn>{{chat::ChatTurn::Role::system, "Be brief."}, {chat::ChatTurn::Role::user, "Hi"}}, true);
  if (r1_tokenizer()->decode(prompt) != expected) return encode("wrong prompt: " + r1_tokenizer()->decode(prompt) + "<｜end▁of▁sentence｜>");
  return encode(kReply + kPastTheEnd);
}

std::shared_ptr<const deepseek_v3::Checkpoint> tiny_checkpoint() {
  static const auto checkpoint =
      std::shared_ptr<const deepseek_v3::Checkpoint>(deepseek_v3::Checkpoint::open(testing::tiny_deepseek_model()));
  return checkpoint;
}

std::shared_ptr<ModelRunner> scripted() {
  return std::make_shared<testing::ScriptedRunner>(r1_reply, deepseek_v3::tiny_config({}).engine_view());
}

// A chat answer's text, finish reason, usage and logprobs, from its JSON body or (streamed) its chunks.
testing::StreamedChat chat_answer(const testing::HttpResult& r, bool streamed) {
  if (streamed) return testing::collect_chat_stream(testing::sse_data(r.body));
  const json body = json::parse(r.body);
  const json& choice = body["choices"][0];
  testing::StreamedChat out;
  out.content = choice["message"]["content"];
  out.reasoning = choice["message"].value("reasoning_content", "");
  out.finish = choice["finish_reason"];
  out.usage = body["usage"];
  if (choice["logprobs"].is_object()) out.logprobs = choice["logprobs"]["content"];
  return out;
}

const json kChat = {{"model", "tiny"},
                    {"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}}}};

TEST(DeepseekServer, ChatReturnsReasoningApartFromContent) {
  testing::ServerHarness h(scripted(), r1_tokenizer());
  auto r = post_json(h.port, "/v1/chat/completions", kChat);
  ASSERT_EQ(r.status, 200u) << r.body;
  const json body = json::parse(r.body);
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Hello! How can I help?");
  EXPECT_EQ(body["choices"][0]["message"]["reasoning_content"], "The user greets me.");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["usage"]["prompt_tokens"],
            encode("<｜begin▁of▁sentence｜>Be brief.<｜User｜>Hi<｜Assistant｜><think>\n").size());
  EXPECT_EQ(body["usage"]["completion_tokens"], encode("The user greets me.</think>Hello! How can I help?<｜end▁of▁sentence｜>").size());
  EXPECT_EQ(body["usage"]["completion_tokens_details"]["reasoning_tokens"],
            encode("The user greets me.</think>").size());

  json streaming = kChat;
  streaming["stream"] = true;
  const auto events = testing::sse_data(post_json(h.port, "/v1/chat/completions", streaming).body);
  ASSERT_FALSE(events.empty());
  ASSERT_EQ(events.back(), "[DONE]");
  const testing::StreamedChat streamed = testing::collect_chat_stream(events);
  EXPECT_EQ(streamed.content, "Hello! How can I help?");
  EXPECT_EQ(streamed.reasoning, "The user greets me.");
  EXPECT_EQ(streamed.finish, "stop");

  json stopped = kChat;
  stopped["stop"] = "How";
  EXPECT_EQ(json::parse(post_json(h.port, "/v1/chat/completions", stopped).body)["choices"][0]["message"]["content"],
            "Hello! ");
}

TEST(DeepseekServer, WhatR1DoesNotServeIs400) {
  testing::ServerHarness h(scripted(), r1_tokenizer());
  json tools = kChat;
  tools["tools"] = json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
  auto r = post_json(h.port, "/v1/chat/completions", tools);
  EXPECT_EQ(r.status, 400u);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "tools");
  json tool_role = kChat;
  tool_role["messages"].push_back({{"role", "tool"}, {"content", "x"}});
  EXPECT_EQ(post_json(h.port, "/v1/chat/completions", tool_role).status, 400u);
  json effort = kChat;
  effort["reasoning_effort"] = "low";
  EXPECT_EQ(post_json(h.port, "/v1/chat/completions", effort).status, 400u);
  auto responses = post_json(h.port, "/v1/responses", {{"model", "tiny"}, {"input", "Hi"}});
  EXPECT_EQ(responses.status, 400u);
  EXPECT_NE(responses.body.find("/v1/chat/completions"), std::string::npos);
}

TEST(DeepseekServer, ResponseFormatIs400NamingItAndTextIsServed) {
  testing::ServerHarness h(scripted(), r1_tokenizer());
  const json schema = {{"name", "n"}, {"schema", {{"type", "object"}}}};
  for (const json& format : {json{{"type", "json_object"}}, json{{"type", "json_schema"}, {"json_schema", schema}}}) {
    json request = kChat;
    request["response_format"] = format;
    testing::expect_error(post_json(h.port, "/v1/chat/completions", request), 400,
                          "'response_format' is not supported for DeepSeek-R1 models", "response_format");
  }
  json text = kChat;
  text["response_format"] = {{"type", "text"}};
  auto r = post_json(h.port, "/v1/chat/completions", text);
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(json::parse(r.body)["choices"][0]["message"]["content"], "Hello! How can I help?");
}

TEST(DeepseekServer, IgnoreEosReadsOnPastTheEndOfSentenceAndStopTokenIdsEndTheReplyStreamedOrNot) {
  testing::ServerHarness h(scripted(), r1_tokenizer());
  const std::vector<int32_t> reasoning = encode("The user greets me.</think>");
  const int32_t answer_start = encode("Hello! How can I help?").front();
  ASSERT_EQ(std::count(reasoning.begin(), reasoning.end(), answer_start), 0);
  const size_t past_the_script = encode(kReply + kPastTheEnd).size() + 2;  // two more ends of sentence
  struct Case {
    const char* name;
    json fields;
    std::string content, finish;
    size_t completion_tokens;
  };
  const Case cases[] = {
      {"plain", json::object(), "Hello! How can I help?", "stop", encode(kReply).size()},
      {"ignore_eos", {{"ignore_eos", true}, {"max_tokens", past_the_script}}, "Hello! How can I help? Anything else?",
       "length", past_the_script},
      // vLLM leaves the stop token out of the text; the usage counts it.
      {"stop_token_ids", {{"stop_token_ids", json::array({answer_start})}}, "", "stop", reasoning.size() + 1},
  };
  for (const Case& c : cases) {
    for (bool stream : {false, true}) {
      SCOPED_TRACE(std::string(c.name) + (stream ? ", streamed" : ""));
      json request = kChat;
      request.update(c.fields);
      request["stream"] = stream;
      request["stream_options"] = {{"include_usage", true}};
      const auto r = post_json(h.port, "/v1/chat/completions", request);
      ASSERT_EQ(r.status, 200u) << r.body;
      const testing::StreamedChat got = chat_answer(r, stream);
      EXPECT_EQ(got.reasoning, "The user greets me.");
      EXPECT_EQ(got.content, c.content);
      EXPECT_EQ(got.finish, c.finish);
      EXPECT_EQ(got.usage["completion_tokens"], c.completion_tokens);
    }
  }
}

TEST(DeepseekServer, ChatLogprobsAreTheLogSoftmaxOfTheRunnersLogitsStreamedOrNot) {
  const std::vector<chat::ChatTurn> turns = {{chat::ChatTurn::Role::user, "What is 2+2?"}};
  const std::vector<int32_t> prompt = chat::render_r1_prompt(*r1_tokenizer(), turns);
  DeepseekV3CpuRunner reference(tiny_checkpoint(), 2);
  GenerateOptions options;
  options.max_tokens = 6;
  options.sampling.temperature = 0;
  options.stop_tokens = reference.config().eos_token_ids;
  const std::vector<int32_t> generated = generate_sequence(reference, prompt, options).tokens;
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), generated.begin(), generated.end());
  DeepseekV3CpuRunner fresh(tiny_checkpoint(), 2);
  const auto rows = testing::logits_at_every_position(fresh, all);

  testing::ServerHarness h(std::make_shared<DeepseekV3CpuRunner>(tiny_checkpoint(), 2), r1_tokenizer());
  json request = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "What is 2+2?"}}}},
                  {"max_tokens", 6},  {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 2}};
  const auto r = post_json(h.port, "/v1/chat/completions", request);
  ASSERT_EQ(r.status, 200u) << r.body;
  const json content = chat_answer(r, false).logprobs;
  ASSERT_EQ(content.size(), generated.size()) << r.body;
  for (size_t k = 0; k < generated.size(); ++k) {
    SCOPED_TRACE("token " + std::to_string(k));
    const auto want = testing::log_softmax(rows[prompt.size() - 1 + k]);
    const std::string_view bytes = r1_tokenizer()->token_bytes(generated[k]);
    EXPECT_EQ(content[k]["bytes"], json(std::vector<unsigned char>(bytes.begin(), bytes.end())));
    EXPECT_NEAR(content[k]["logprob"].get<double>(), static_cast<double>(want[generated[k]]), 5e-5);
    std::vector<long double> sorted(want.begin(), want.end());
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    ASSERT_EQ(content[k]["top_logprobs"].size(), 2u);
    for (size_t j = 0; j < 2; ++j)
      EXPECT_NEAR(content[k]["top_logprobs"][j]["logprob"].get<double>(), static_cast<double>(sorted[j]), 5e-5);
  }
  request["stream"] = true;
  EXPECT_EQ(chat_answer(post_json(h.port, "/v1/chat/completions", request), true).logprobs, content);
}

TEST(DeepseekServer, TinyModelCompletionsEqualGenerateWithAndWithoutMtp) {
  const auto checkpoint = tiny_checkpoint();
  const std::vector<int32_t> prompt = encode("<｜begin▁of▁sentence｜><｜User｜>What is 2+2?<｜Assistant｜><think>\n");
  DeepseekV3CpuRunner reference(checkpoint, 2);
  GenerateOptions options;
  options.max_tokens = 10;
  options.sampling.temperature = 0;
  const auto expected = generate_sequence(reference, prompt, options).tokens;
  for (bool mtp : {false, true}) {
    EngineConfig config;
    if (mtp) {
      config.num_kv_blocks = 256;
      config.drafter = std::make_shared<speculative::MtpDrafter>(checkpoint, speculative::MtpDrafterOptions{16, 256, 2});
      config.speculative.method = "mtp";
      config.speculative.num_speculative_tokens = 3;
    }
    testing::ServerHarness h(std::make_shared<DeepseekV3CpuRunner>(checkpoint, 2), r1_tokenizer(), {}, config);
    auto r = post_json(h.port, "/v1/completions",
                       {{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", 10}, {"temperature", 0}, {"ignore_eos", true}});
    ASSERT_EQ(r.status, 200u) << r.body;
    const json body = json::parse(r.body);
    EXPECT_EQ(body["choices"][0]["token_ids"].get<std::vector<int32_t>>(), expected) << (mtp ? "with MTP" : "plain");
    EXPECT_EQ(body["choices"][0]["text"], r1_tokenizer()->decode(expected));
    auto chat = post_json(h.port, "/v1/chat/completions",
                          {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "What is 2+2?"}}}},
                           {"max_tokens", 10}, {"temperature", 0}});
    ASSERT_EQ(chat.status, 200u) << chat.body;
    const chat::R1Reply reply = chat::parse_r1_reply(*r1_tokenizer(), expected);
    EXPECT_EQ(json::parse(chat.body)["choices"][0]["message"]["reasoning_content"].get<std::string>(), reply.reasoning);
  }
}

}  // namespace
}  // namespace moeserve
