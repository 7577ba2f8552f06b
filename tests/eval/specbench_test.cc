// SPEED-Bench's protocol and acceptance-length arithmetic on a fake engine stream, and its dataset loaders.
#include <gtest/gtest.h>

#include "eval/specbench.h"
#include "harmony/completion.h"
#include "harmony/render.h"
#include "test_util.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve::eval {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// A reply in Harmony: analysis, then a final answer naming the turn.
std::vector<int32_t> reply(const Tokenizer& tokenizer, const std::string& final) {
  return tokenizer.encode("<|channel|>analysis<|message|>SECRET THOUGHTS<|end|><|start|>assistant<|channel|>final"
                          "<|message|>" + final + "<|return|>",
                          AllowedSpecial::all());
}

TEST(SpecBench, AcceptanceLengthLeavesOutEachTurnsFirstEvent) {
  SpecBenchRequestResult r;
  count_turn_steps({1, 3, 2}, r);
  count_turn_steps({1, 4}, r);
  count_turn_steps({1}, r);
  EXPECT_EQ(r.turns, 3);
  EXPECT_EQ(r.steps, 3);
  EXPECT_EQ(r.tokens, 9);
  EXPECT_DOUBLE_EQ(*r.acceptance_length(), 3.0);
  SpecBenchRequestResult only_prefill;
  count_turn_steps({1}, only_prefill);
  EXPECT_FALSE(only_prefill.acceptance_length().has_value());
}

TEST(SpecBench, CategoryAndOverallAreMeansOfRequests) {
  SpecBenchResult result;
  auto request = [&](const std::string& category, std::vector<int> events, std::string error = {}) {
    SpecBenchRequestResult r;
    r.question_id = "q";
    r.category = category;
    count_turn_steps(events, r);
    r.error = std::move(error);
    result.requests.push_back(r);
  };
  request("math", {1, 2, 2});       // 2
  request("math", {1, 4, 4, 4});    // 4
  request("writing", {1, 1, 2});    // 1.5
  request("writing", {1});          // no step: left out
  request("coding", {1, 8}, "boom");  // failed: left out
  average_acceptance(result);
  EXPECT_DOUBLE_EQ(result.categories.at("math").acceptance_length, 3.0);
  EXPECT_EQ(result.categories.at("math").requests, 2);
  EXPECT_DOUBLE_EQ(result.categories.at("writing").acceptance_length, 1.5);
  EXPECT_EQ(result.categories.at("writing").requests, 1);
  EXPECT_EQ(result.categories.at("coding").requests, 0);
  EXPECT_EQ(result.overall.requests, 3);
  EXPECT_DOUBLE_EQ(result.overall.acceptance_length, 7.5 / 3);  // over requests, not over categories
  const nlohmann::json j = result.to_json();
  EXPECT_DOUBLE_EQ(j["categories"]["math"]["acceptance_length"].get<double>(), 3.0);
  EXPECT_TRUE(j["categories"]["coding"]["acceptance_length"].is_null());
  EXPECT_EQ(j["requests"][4]["error"], "boom");
  const std::string table = result.table();
  EXPECT_NE(table.find("math"), std::string::npos);
  EXPECT_NE(table.find("3.000"), std::string::npos);
  EXPECT_NE(table.find("overall"), std::string::npos);
  EXPECT_NE(table.find("2.500"), std::string::npos);
}

TEST(SpecBench, EachTurnSeesOnlyEarlierFinalAnswers) {
  const auto tokenizer = Tokenizer::o200k_harmony();
  const std::vector<SpecBenchItem> items = {{"a", "math", {"What is 2+2?", "And 3+3?"}},
                                            {"b", "writing", {"Write a haiku."}}};
  std::vector<std::vector<std::vector<int32_t>>> rounds;
  int call = 0;
  const TurnGenerator fake = [&](const std::vector<std::vector<int32_t>>& prompts) {
    rounds.push_back(prompts);
    std::vector<TurnOutput> out;
    for (size_t i = 0; i < prompts.size(); ++i) {
      TurnOutput o;
      o.tokens = reply(*tokenizer, fmt::format("answer {}.{}", call, i));
      // The stream: the prefill's token, then verify steps of 3 until the rest is out.
      o.event_tokens.push_back(1);
      for (int left = static_cast<int>(o.tokens.size()) - 1; left > 0; left -= 3)
        o.event_tokens.push_back(std::min(3, left));
      out.push_back(o);
    }
    ++call;
    return out;
  };
  const SpecBenchResult result = run_specbench(items, *tokenizer, harmony::ReasoningEffort::low, fake);
  ASSERT_EQ(rounds.size(), 2u);
  ASSERT_EQ(rounds[0].size(), 2u);
  ASSERT_EQ(rounds[1].size(), 1u);  // b has one turn
  // Turn 2 of a: the system message, turn 1, the final answer of turn 1 only, turn 2.
  harmony::Conversation expected = {
      harmony::system_message(harmony::ReasoningEffort::low),
      harmony::Message::text(harmony::Role::user, "What is 2+2?"),
      harmony::Message::text(harmony::Role::assistant, "answer 0.0").with_channel("final"),
      harmony::Message::text(harmony::Role::user, "And 3+3?")};
  EXPECT_EQ(rounds[1][0], harmony::render_conversation_for_completion(*tokenizer, expected));
  EXPECT_EQ(tokenizer->decode(rounds[1][0]).find("SECRET"), std::string::npos);
  ASSERT_EQ(result.requests.size(), 2u);
  EXPECT_EQ(result.requests[0].turns, 2);
  EXPECT_EQ(result.requests[1].turns, 1);
  EXPECT_GT(*result.requests[0].acceptance_length(), 2.0);
  EXPECT_LE(*result.requests[0].acceptance_length(), 3.0);
}

TEST(SpecBench, LoadsParquetAndJsonLines) {
  const auto parquet =
      load_specbench_items(MOESERVE_SOURCE_DIR "/tests/bench/fixtures/parquet/speed_bench_shape.parquet");
  ASSERT_EQ(parquet.size(), 12u);
  EXPECT_EQ(parquet[4].question_id, "q4");
  EXPECT_EQ(parquet[4].category, "math");
  EXPECT_EQ(parquet[4].turns, (std::vector<std::string>{"turn 0 of q4", "tour 1 de q4 — été"}));

  const std::string dir = moeserve::testing::temp_dir("specbench");
  write_text_file(dir + "/mt.jsonl", R"({"question_id": 81, "category": "writing", "turns": ["one", "two"]}
{"question_id": "x", "category": "math", "turns": ["three"], "reference": ["3"]}
)");
  const auto jsonl = load_specbench_items(dir + "/mt.jsonl");
  ASSERT_EQ(jsonl.size(), 2u);
  EXPECT_EQ(jsonl[0].question_id, "81");
  EXPECT_EQ(jsonl[0].turns.size(), 2u);
  EXPECT_EQ(jsonl[1].category, "math");

  write_text_file(dir + "/bad.jsonl", "{\"question_id\": 1, \"turns\": [\"a\"]}\n");
  EXPECT_NE(error_of([&] { load_specbench_items(dir + "/bad.jsonl"); }).find("bad.jsonl:1: missing \"category\""),
            std::string::npos);
  write_text_file(dir + "/empty.jsonl", "{\"question_id\": 1, \"category\": \"qa\", \"turns\": []}\n");
  EXPECT_NE(error_of([&] { load_specbench_items(dir + "/empty.jsonl"); }).find("question 1 has no turns"),
            std::string::npos);
  write_text_file(dir + "/placeholder.jsonl",
                  "{\"question_id\": \"rag-1\", \"category\": \"rag\", \"turns\": [\"FULL BENCHMARK DATA SHOULD BE "
                  "FETCHED FROM THE SOURCE USING SPECDEC_BENCH\"]}\n");
  EXPECT_NE(error_of([&] { load_specbench_items(dir + "/placeholder.jsonl"); }).find("prepare_data.py"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load_specbench_items(dir + "/data.csv"); }).find(".parquet or .jsonl"), std::string::npos);
}

}  // namespace
}  // namespace moeserve::eval
