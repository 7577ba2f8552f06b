// The generation parameters over HTTP with the official openai npm client (tests/server/openai_sampling_client.mjs),
// on the tiny model's CPU runner. Every answer is checked against an oracle (tests/sampling/logits_oracle.h):
// logprobs and echoed prompt logprobs against the log-softmax of the runner's logits, penalised tokens against
// the draws from the oracle's edit of those logits; streamed answers equal the non-streamed ones; logit_bias,
// stop_token_ids, min_tokens and ignore_eos by what they force; out-of-range values are 400s naming the field.
#include <gtest/gtest.h>

#include <cmath>

#include "sampling/logits_oracle.h"
#include "sampling/sampler.h"
#include "server/logprobs_json.h"
#include "server/server_harness.h"
#include "structured/schema_testing.h"
#include "test_util.h"

namespace moeserve {
namespace {

using nlohmann::json;

std::vector<int32_t> ids_of(const json& list) { return list.get<std::vector<int32_t>>(); }

// Rows of raw logits for prompt + generated (row i predicts token i + 1).
std::vector<std::vector<float>> rows_for(const std::vector<int32_t>& prompt, const std::vector<int32_t>& generated) {
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), generated.begin(), generated.end());
  return testing::logits_at_every_position(testing::tiny_checkpoint(), all);
}

// The completions logprobs of `token` from `row`: its log-softmax, and the top k's values in order.
void expect_completion_logprob(const std::vector<float>& row, int32_t token, const json& logprob, const json& top,
                               size_t k, const std::string& where) {
  const auto want = testing::log_softmax(row);
  EXPECT_NEAR(logprob.get<double>(), static_cast<double>(want[token]), 5e-5) << where;
  std::vector<long double> sorted(want.begin(), want.end());
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  std::vector<double> got;
  for (const auto& [text, value] : top.items()) got.push_back(value.get<double>());
  std::sort(got.begin(), got.end(), std::greater<>());
  ASSERT_LE(got.size(), k) << where;
  ASSERT_GE(got.size(), 1u) << where;  // texts of distinct tokens may coincide as keys
  for (size_t j = 0; j < got.size(); ++j) EXPECT_NEAR(got[j], static_cast<double>(sorted[j]), 5e-5) << where;
}

class GenerationParameters : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    testing::ServerHarness h(testing::tiny_runner());
    const std::string script = std::string(MOESERVE_SOURCE_DIR) + "/tests/server/openai_sampling_client.mjs";
    auto result = testing::run_command("node " + script + " " + std::to_string(h.port));
    ASSERT_EQ(result.exit_code, 0) << result.output;
    report_ = new json(json::parse(result.output.substr(result.output.find('{'))));
  }
  static void TearDownTestSuite() { delete report_; }
  const json& report() const { return *report_; }
  std::vector<int32_t> prompt() const { return ids_of(report()["prompt"]); }
  static json* report_;
};
json* GenerationParameters::report_ = nullptr;

TEST_F(GenerationParameters, CompletionsLogprobsAreTheLogSoftmaxOfTheRunnersLogitsStreamedOrNot) {
  const json& r = report()["completions_logprobs"];
  EXPECT_EQ(r["stream"]["token_ids"], r["once"]["token_ids"]);
  EXPECT_EQ(r["stream"]["logprobs"], r["once"]["logprobs"]);
  const auto tokens = ids_of(r["once"]["token_ids"]);
  ASSERT_EQ(tokens.size(), 6u);
  const json& lp = r["once"]["logprobs"];
  ASSERT_EQ(lp["token_logprobs"].size(), 6u);
  const auto rows = rows_for(prompt(), tokens);
  for (size_t k = 0; k < tokens.size(); ++k) {
    expect_completion_logprob(rows[prompt().size() - 1 + k], tokens[k], lp["token_logprobs"][k], lp["top_logprobs"][k],
                              5, "token " + std::to_string(k));
    EXPECT_EQ(lp["tokens"][k], server::token_text(*testing::tokenizer(), tokens[k]));
  }
  EXPECT_EQ(lp["text_offset"][0], 0);
}

TEST_F(GenerationParameters, EchoGivesPromptLogprobsAsLmEvaluationHarnessReadsThem) {
  const json& r = report()["echo"];
  EXPECT_EQ(r["stream"]["logprobs"], r["once"]["logprobs"]);
  EXPECT_EQ(r["stream"]["text"], r["once"]["text"]);
  const auto p = prompt();
  const auto generated = ids_of(r["once"]["token_ids"]);
  ASSERT_EQ(generated.size(), 1u);
  const json& lp = r["once"]["logprobs"];
  ASSERT_EQ(lp["token_logprobs"].size(), p.size() + 1);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  const auto rows = rows_for(p, generated);
  for (size_t i = 1; i < p.size(); ++i)
    expect_completion_logprob(rows[i - 1], p[i], lp["token_logprobs"][i], lp["top_logprobs"][i], 1,
                              "prompt token " + std::to_string(i));
  expect_completion_logprob(rows[p.size() - 1], generated[0], lp["token_logprobs"][p.size()],
                            lp["top_logprobs"][p.size()], 1, "generated token");
  EXPECT_EQ(generated[0], argmax(rows[p.size() - 1]));  // temperature 0
  const std::string prompt_text = testing::tokenizer()->decode(p);
  EXPECT_EQ(r["once"]["text"].get<std::string>().substr(0, prompt_text.size()), prompt_text);
}

TEST_F(GenerationParameters, ChatLogprobsCoverEveryTokenWithSortedTopLogprobsStreamedOrNot) {
  const json& r = report()["chat_logprobs"];
  const json& once = r["once"]["logprobs"];
  ASSERT_EQ(once.size(), r["once"]["usage"]["completion_tokens"].get<size_t>());
  ASSERT_EQ(r["stream"]["logprobs"].size(), once.size());
  for (size_t k = 0; k < once.size(); ++k) {
    EXPECT_EQ(r["stream"]["logprobs"][k]["token"], once[k]["token"]);
    EXPECT_EQ(r["stream"]["logprobs"][k]["logprob"], once[k]["logprob"]);
    const json& top = once[k]["top_logprobs"];
    ASSERT_EQ(top.size(), 3u);
    for (size_t j = 1; j < top.size(); ++j) EXPECT_GE(top[j - 1]["logprob"], top[j]["logprob"]);
    EXPECT_LE(once[k]["logprob"].get<double>(), top[0]["logprob"].get<double>() + 1e-6);
    EXPECT_LT(once[k]["logprob"].get<double>(), 0.0);
    EXPECT_FALSE(once[k]["bytes"].empty());
  }
}

TEST_F(GenerationParameters, PenalisedTokensAreTheOraclesDrawsStreamedOrNot) {
  const auto p = prompt();
  LogitsProcessing penalties;
  penalties.presence_penalty = -2.0f;
  penalties.frequency_penalty = -2.0f;
  penalties.repetition_penalty = 1.3f;
  for (const char* name : {"penalised", "penalised_sampled"}) {
    SCOPED_TRACE(name);
    const json& r = report()[name];
    EXPECT_EQ(r["stream"]["token_ids"], r["once"]["token_ids"]);
    const auto tokens = ids_of(r["once"]["token_ids"]);
    ASSERT_EQ(tokens.size(), 16u);
    moeserve::SamplingParams sampling;
    sampling.temperature = std::string(name) == "penalised" ? 0.0f : 1.0f;
    sampling.seed = 5;
    const auto rows = rows_for(p, tokens);
    for (size_t k = 0; k < tokens.size(); ++k) {
      const std::vector<int32_t> output(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(k));
      const auto edited = testing::oracle_edit(rows[p.size() - 1 + k], penalties, p, output, false, {});
      EXPECT_EQ(tokens[k], sample_token(edited, sampling, k)) << "token " << k;
    }
  }
  EXPECT_NE(report()["penalised"]["once"]["token_ids"], report()["plain"]["once"]["token_ids"]);
  EXPECT_EQ(report()["chat_penalised"]["stream"]["content"], report()["chat_penalised"]["once"]["content"]);
}

TEST_F(GenerationParameters, LogitBiasStopTokenIdsMinTokensAndIgnoreEosDoWhatTheyForce) {
  for (const char* mode : {"once", "stream"}) {
    SCOPED_TRACE(mode);
    EXPECT_EQ(ids_of(report()["logit_bias"][mode]["token_ids"]), std::vector<int32_t>(5, 1234));
    std::string five;
    for (int i = 0; i < 5; ++i) five += server::token_text(*testing::tokenizer(), 1234);
    EXPECT_EQ(report()["chat_logit_bias"][mode]["content"], five);

    const int32_t first = report()["plain"]["once"]["token_ids"][0];
    EXPECT_EQ(ids_of(report()["stop_token_ids"][mode]["token_ids"]), std::vector<int32_t>{first});
    EXPECT_EQ(report()["stop_token_ids"][mode]["finish_reason"], "stop");
    EXPECT_EQ(report()["stop_token_ids"][mode]["text"], "");  // vLLM: the stop token is not text
    const auto held = ids_of(report()["min_tokens"][mode]["token_ids"]);
    ASSERT_GE(held.size(), 4u);
    for (size_t k = 0; k < 4; ++k) EXPECT_NE(held[k], first) << k;
    if (report()["min_tokens"][mode]["finish_reason"] == "stop") {
      EXPECT_EQ(held.back(), first);
    }
  }
  // <|return|> forced by the bias: chat stops on it at once; with ignore_eos it goes on to max_tokens; min_tokens 3
  // holds it back for three tokens, and the fourth is it.
  EXPECT_EQ(report()["chat_return"]["once"]["usage"]["completion_tokens"], 1);
  EXPECT_EQ(report()["chat_return"]["once"]["finish_reason"], "stop");
  EXPECT_EQ(report()["chat_ignore_eos"]["once"]["usage"]["completion_tokens"], 4);
  EXPECT_EQ(report()["chat_ignore_eos"]["once"]["finish_reason"], "length");
  EXPECT_EQ(report()["chat_ignore_eos"]["stream"]["usage"]["completion_tokens"], 4);
  EXPECT_EQ(report()["chat_min_tokens"]["once"]["usage"]["completion_tokens"], 4);
  EXPECT_EQ(report()["chat_min_tokens"]["once"]["finish_reason"], "stop");
  EXPECT_EQ(report()["chat_min_tokens"]["stream"]["usage"]["completion_tokens"], 4);
}

TEST_F(GenerationParameters, JsonSchemaOutputsParseAndValidateStreamedOrNot) {
  for (const char* mode : {"once", "stream"}) {
    SCOPED_TRACE(mode);
    const json& r = report()["json_schema"][mode];
    EXPECT_EQ(r["finish_reason"], "stop");
    const json parsed = json::parse(r["text"].get<std::string>(), nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << r["text"];
    EXPECT_TRUE(testing::validates(parsed, report()["schema"])) << r["text"];
  }
  EXPECT_EQ(report()["json_schema"]["stream"]["token_ids"], report()["json_schema"]["once"]["token_ids"]);
  EXPECT_EQ(report()["chat_json_schema_status"], "length");  // the random model never reaches its final channel
}

TEST_F(GenerationParameters, NChoicesAreTheRequestsOfSeedPlusIStreamedOrNot) {
  const json& r = report()["n"];
  ASSERT_EQ(r["once"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r["once"][i]["index"], i);
    EXPECT_EQ(r["once"][i]["token_ids"], r["single"][i]) << i;
    EXPECT_EQ(r["stream"][i], r["single"][i]) << i;
  }
  EXPECT_NE(r["single"][0], r["single"][1]);
}

TEST_F(GenerationParameters, ChatNChoicesAreTheRequestsOfSeedPlusIStreamedOrNot) {
  const json& r = report()["chat_n"];
  ASSERT_EQ(r["once"].size(), 3u);
  int64_t completion_tokens = 0;
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE("choice " + std::to_string(i));
    json once = r["once"][i];
    EXPECT_EQ(once["index"], i);
    once.erase("index");
    EXPECT_EQ(once, r["single"][i]);
    EXPECT_EQ(r["stream"][i], r["single"][i]);
    EXPECT_FALSE(r["single"][i]["tokens"].empty());
    completion_tokens += r["single_usage"][i]["completion_tokens"].get<int64_t>();
  }
  EXPECT_NE(r["single"][0]["tokens"], r["single"][1]["tokens"]);
  // The prompt counts once; the completion tokens of every choice add up.
  EXPECT_EQ(r["usage"]["prompt_tokens"], r["single_usage"][0]["prompt_tokens"]);
  EXPECT_EQ(r["usage"]["completion_tokens"], completion_tokens);
}

TEST(GenerationParametersN, OnePrefillServesAllNChoicesThroughThePrefixCache) {
  testing::ServerHarness h(testing::tiny_runner());
  std::vector<int32_t> prompt(40);
  for (int i = 0; i < 40; ++i) prompt[i] = 1000 + 7 * i;
  std::string words;
  for (int i = 0; i < 40; ++i) words += " word" + std::to_string(i);
  const json four = {{"model", "tiny"}, {"max_tokens", 3}, {"n", 4}, {"seed", 1}};
  json completions = four, chat = four;
  completions["prompt"] = prompt;
  chat["messages"] = {{{"role", "user"}, {"content", words}}};
  const json requests[][2] = {{json("/v1/completions"), completions}, {json("/v1/chat/completions"), chat}};
  for (const auto& [route, body] : requests) {
    SCOPED_TRACE(route.get<std::string>());
    const uint64_t hits_before = h.engine->metrics().prefix_hit_tokens;
    const auto reply = testing::post_json(h.port, route.get<std::string>(), body);
    ASSERT_EQ(reply.status, 200u) << reply.body;
    const json answer = json::parse(reply.body);
    EXPECT_EQ(answer["choices"].size(), 4u);
    // The prompt counts once; the three later choices each found the first's full prompt blocks (of 16 tokens)
    // in the cache.
    const int64_t prompt_tokens = answer["usage"]["prompt_tokens"];
    if (route == "/v1/completions") {
      EXPECT_EQ(prompt_tokens, 40);
    }
    ASSERT_GE(prompt_tokens, 32);
    const auto full_blocks = static_cast<uint64_t>((prompt_tokens - 1) / 16 * 16);
    EXPECT_GE(h.engine->metrics().prefix_hit_tokens - hits_before, 3 * full_blocks);
  }
}

TEST_F(GenerationParameters, AForcedToolCallsThatToolWithArgumentsOfItsSchemaStreamedOrNot) {
  const json& once = report()["forced_tool"]["once"];
  EXPECT_EQ(once["finish_reason"], "tool_calls");
  ASSERT_EQ(once["tool_calls"].size(), 1u);
  EXPECT_EQ(once["tool_calls"][0]["function"]["name"], "get_weather");
  const std::string arguments = once["tool_calls"][0]["function"]["arguments"];
  const json parsed = json::parse(arguments, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << arguments;
  EXPECT_TRUE(testing::validates(parsed, report()["tool_parameters"])) << arguments;
  const json& stream = report()["forced_tool"]["stream"];
  EXPECT_EQ(stream["name"], "get_weather");
  EXPECT_EQ(stream["arguments"], arguments);  // the same seed
  EXPECT_EQ(stream["finish_reason"], "tool_calls");
}

TEST_F(GenerationParameters, OutOfRangeValuesAre400sNamingTheField) {
  for (const auto& [name, error] : report()["errors"].items()) {
    ASSERT_TRUE(error.is_object()) << name << " was " << error.dump();
    EXPECT_EQ(error["status"], 400) << name;
    EXPECT_NE(error["param"].get<std::string>().find(name), std::string::npos) << name << ": " << error.dump();
  }
}

}  // namespace
}  // namespace moeserve
