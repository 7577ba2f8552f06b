// Dataset loaders on real rows (tests/fixtures/eval: excerpts of public sets, SOURCES.md) and on GPQA rows written in
// the release CSV's column layout; each scored with known-correct and known-wrong answers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "eval/datasets.h"
#include "eval/prompts.h"
#include "eval/scoring.h"
#include "eval_test_util.h"
#include "test_util.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve::eval {
namespace {

using ::testing::HasSubstr;
using testing::harmony_reply;

const std::string kFixtures = MOESERVE_SOURCE_DIR "/tests/fixtures/eval";

// Scores one reply per question: `answer(question)` builds it.
template <typename Answer>
std::vector<ScoredSample> score_all(const std::vector<EvalQuestion>& questions, Answer&& answer) {
  std::vector<SampleToScore> samples;
  for (const EvalQuestion& q : questions) samples.push_back({q.dataset, q.ground_truth, harmony_reply(answer(q))});
  return SampleScorer(Rules::gpt_oss, {}, nullptr).score(samples);
}

TEST(Datasets, MlperfPicksTheScorerFromTheName) {
  EXPECT_EQ(scorer_for_dataset("aime25"), ScorerKind::aime);
  EXPECT_EQ(scorer_for_dataset("AIME1983"), ScorerKind::aime);
  EXPECT_EQ(scorer_for_dataset("gpqa_diamond"), ScorerKind::gpqa);
  EXPECT_EQ(scorer_for_dataset("livecodebench_v6"), ScorerKind::livecodebench);
  EXPECT_EQ(scorer_for_dataset("mmlu_pro"), ScorerKind::mmlu_pro);
  EXPECT_EQ(scorer_for_dataset("mmlu"), ScorerKind::mmlu_pro);
  EXPECT_EQ(scorer_for_dataset("math500"), ScorerKind::math500);
  EXPECT_EQ(scorer_for_dataset("pubmed_summarization"), std::nullopt);
  EXPECT_THAT([] { load_questions(ScorerKind::aime, kFixtures + "/aime25_excerpt.jsonl", "gpqa"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("would be scored as gpqa")));
}

TEST(Datasets, AimeRowsScoreAsIntegers) {
  std::vector<EvalQuestion> questions = load_questions(ScorerKind::aime, kFixtures + "/aime24_excerpt.jsonl", "aime24");
  const std::vector<EvalQuestion> aime25 = load_questions(ScorerKind::aime, kFixtures + "/aime25_excerpt.jsonl", "aime25");
  questions.insert(questions.end(), aime25.begin(), aime25.end());
  ASSERT_EQ(questions.size(), 6u);
  EXPECT_EQ(questions[0].ground_truth, "204");
  EXPECT_EQ(questions[2].ground_truth, "033");  // zero-padded in the release
  EXPECT_EQ(questions[3].ground_truth, "70");
  EXPECT_THAT(questions[3].question, HasSubstr("integer bases"));
  EXPECT_EQ(questions[3].id, "1");
  for (const ScoredSample& s :
       score_all(questions, [](const EvalQuestion& q) { return "\\boxed{" + std::to_string(std::stoi(q.ground_truth)) + "}"; })) {
    EXPECT_TRUE(s.correct) << s.detail;
  }
  for (const ScoredSample& s : score_all(questions, [](const EvalQuestion& q) {
         return "Answer: " + std::to_string(std::stoi(q.ground_truth) + 1);
       })) {
    EXPECT_FALSE(s.correct);
  }
}

TEST(Datasets, MmluProRowsShowTheirChoices) {
  const std::vector<EvalQuestion> questions =
      load_questions(ScorerKind::mmlu_pro, kFixtures + "/mmlu_pro_excerpt.jsonl", "mmlu_pro");
  ASSERT_EQ(questions.size(), 7u);
  EXPECT_EQ(questions[0].id, "mp-7073");
  EXPECT_EQ(questions[0].ground_truth, "E");
  EXPECT_THAT(questions[0].question, HasSubstr("What is the current price index?\nA) 100\nB) 140\nC) 150\n"));
  EXPECT_THAT(questions[0].question, HasSubstr("\nJ) 160"));
  EXPECT_THAT(questions[2].question, ::testing::Not(HasSubstr("\nE) ")));  // four choices only
  for (const ScoredSample& s : score_all(questions, [](const EvalQuestion& q) { return "Answer: " + q.ground_truth; })) {
    EXPECT_TRUE(s.correct) << s.detail;
  }
  for (const ScoredSample& s : score_all(questions, [](const EvalQuestion& q) {
         return std::string("Answer: ") + (q.ground_truth == "A" ? "B" : "A");
       })) {
    EXPECT_FALSE(s.correct);
  }
}

// Rows written for this test in the GPQA release CSV's layout (its questions are not to be shown in plain
// text): quoted fields with commas, doubled quotes and newlines.
constexpr const char* kGpqaCsv =
    "Pre-Revision Question,Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3,"
    "Explanation,Subdomain,High-level domain,Record ID,Canary String\r\n"
    "x,\"Which gas, at room temperature, is a noble gas?\",Argon,Oxygen,Nitrogen,\"Carbon dioxide\",because,"
    "Chemistry (general),Chemistry,recTEST0001,canary\r\n"
    "y,\"A ball is \"\"dropped\"\" from rest.\nWhat is its speed after 1 s (g = 10 m/s^2)?\",10 m/s,5 m/s,20 m/s,"
    "1 m/s,v = g t,Physics (general),Physics,recTEST0002,canary\r\n";

TEST(Datasets, GpqaCsvShufflesAnswersAndKnowsTheLetter) {
  const std::string dir = moeserve::testing::temp_dir("gpqa");
  write_text_file(dir + "/gpqa_diamond.csv", kGpqaCsv);
  const std::vector<EvalQuestion> questions = load_questions(ScorerKind::gpqa, dir + "/gpqa_diamond.csv", "gpqa_diamond");
  ASSERT_EQ(questions.size(), 2u);
  EXPECT_EQ(questions[0].id, "recTEST0001");
  EXPECT_THAT(questions[1].question, HasSubstr("A ball is \"dropped\" from rest.\nWhat is its speed"));
  for (const EvalQuestion& q : questions) {
    const std::string correct = q.id == "recTEST0001" ? "Argon" : "10 m/s";
    EXPECT_THAT(q.question, HasSubstr("\n" + q.ground_truth + ") " + correct)) << q.question;
  }
  // The order is a fixed function of the seed and the record id; another seed moves the answers.
  EXPECT_EQ(gpqa_choice_order(0, "recTEST0001"), gpqa_choice_order(0, "recTEST0001"));
  bool moved = false;
  for (uint64_t seed = 1; seed < 8; ++seed) moved |= gpqa_choice_order(seed, "recTEST0001") != gpqa_choice_order(0, "recTEST0001");
  EXPECT_TRUE(moved);
  for (const ScoredSample& s : score_all(questions, [](const EvalQuestion& q) { return "**" + q.ground_truth + "**"; })) {
    EXPECT_TRUE(s.correct) << s.detail;
  }
  for (const ScoredSample& s : score_all(questions, [](const EvalQuestion& q) {
         return std::string("Answer: ") + (q.ground_truth == "D" ? "A" : "D");
       })) {
    EXPECT_FALSE(s.correct);
  }
  write_text_file(dir + "/broken.csv", "Question,Correct Answer\n\"open");
  EXPECT_THROW(load_questions(ScorerKind::gpqa, dir + "/broken.csv", "gpqa"), Error);
}

TEST(Datasets, CsvFollowsRfc4180) {
  const auto rows = parse_csv("a,\"b,c\",\"d\"\"e\"\r\n\"multi\nline\",,\n");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"a", "b,c", "d\"e"}));
  EXPECT_EQ(rows[1], (std::vector<std::string>{"multi\nline", "", ""}));
}

TEST(Datasets, LiveCodeBenchQuestionsUseTheGenericTemplate) {
  const std::vector<EvalQuestion> questions =
      load_questions(ScorerKind::livecodebench, kFixtures + "/lcb_excerpt.jsonl", "livecodebench");
  ASSERT_EQ(questions.size(), 7u);
  EXPECT_EQ(questions[1].ground_truth, "2727");
  ASSERT_NE(questions[1].problem, nullptr);
  EXPECT_THAT(questions[1].question, HasSubstr("### Format: You will use the following starter code"));
  EXPECT_THAT(questions[1].question, HasSubstr("```python\nclass Solution:\n    def countSeniors"));
  EXPECT_THAT(questions[0].question, HasSubstr("```python\n# YOUR CODE HERE\n```\n\n### Answer:"));
}

TEST(Prompts, CarryTheDatasetInstructions) {
  const std::vector<EvalQuestion> questions =
      load_questions(ScorerKind::aime, kFixtures + "/aime25_excerpt.jsonl", "aime25");
  const harmony::Conversation c = question_conversation(questions[0], harmony::ReasoningEffort::high);
  ASSERT_EQ(c.size(), 3u);
  const auto& system = std::get<harmony::SystemContent>(c[0].content);
  EXPECT_EQ(system.reasoning_effort, harmony::ReasoningEffort::high);
  EXPECT_EQ(system.conversation_start_date, "2025-09-30");
  const auto& developer = std::get<harmony::DeveloperContent>(c[1].content);
  EXPECT_THAT(*developer.instructions, HasSubstr("integer enclosed in \\boxed{answer}"));
  EXPECT_THAT(*developer.instructions, HasSubstr("as few tokens as possible"));
  EXPECT_EQ(c[2].text_content(), questions[0].question);
  EXPECT_THAT(dataset_instructions(ScorerKind::livecodebench), HasSubstr("problem.Do not repeat steps"));
}

TEST(Scoring, CodeThatCannotRunIsWrongWithoutRunning) {
  const SampleScorer scorer(Rules::gpt_oss, {}, nullptr);  // no runner: nothing may be run
  const std::vector<ScoredSample> s = scorer.score({{"livecodebench_v6", "2727", harmony_reply("no code")},
                                                    {"livecodebench_v6", "2727", harmony_reply("```python\n```")},
                                                    {"livecodebench_v6", "9999", harmony_reply("```python\nx\n```")}});
  EXPECT_EQ(s[0].detail, "No code extracted from model output");
  EXPECT_EQ(s[1].detail, "No code or question_id provided");
  EXPECT_EQ(s[2].detail, "Question ID '9999' not found in benchmark");
  for (const ScoredSample& x : s) EXPECT_FALSE(x.correct);
  EXPECT_THROW(scorer.score({{"healthbench", "x", "y"}}), Error);
}

TEST(PassAtOne, AveragesQuestionsWithANormalInterval) {
  const PassAtOne p = pass_at_one({{true, true, false, false}, {true, true, true, false}, {true, false, false, false}});
  EXPECT_EQ(p.questions, 3);
  EXPECT_EQ(p.samples, 12);
  EXPECT_DOUBLE_EQ(p.pass_at_1, 0.5);
  // rates 0.5, 0.75, 0.25: s = 0.25, half width 1.96 * 0.25 / sqrt(3)
  EXPECT_NEAR(p.ci_high - p.pass_at_1, 1.96 * 0.25 / std::sqrt(3.0), 1e-12);
  EXPECT_NEAR(p.pass_at_1 - p.ci_low, 1.96 * 0.25 / std::sqrt(3.0), 1e-12);
  EXPECT_DOUBLE_EQ(pass_at_one({{true, false}, {true, true}, {false, false}}).ci_low, 0.0);  // clipped
  const PassAtOne all = pass_at_one({{true}, {true}});
  EXPECT_DOUBLE_EQ(all.ci_low, 1.0);
  EXPECT_DOUBLE_EQ(all.ci_high, 1.0);
  EXPECT_EQ(pass_at_one({}).questions, 0);
  EXPECT_NEAR(mlperf_final_score({{"aime25", 200, 240, 8}, {"gpqa_diamond", 750, 990, 5}, {"livecodebench_v6", 2680, 3165, 3}}),
              (25.0 + 150 + 2680.0 / 3) / (30 + 198 + 1055) * 100, 1e-9);
}

}  // namespace
}  // namespace moeserve::eval
