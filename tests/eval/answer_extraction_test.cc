// Crafted outputs for each extraction rule with the verdict MLPerf's reference gives them. Every expected value
// below was produced by running the reference functions themselves (language/gpt-oss-120b/eval_accuracy.py and
// language/deepseek-r1/eval_accuracy.py @b66003e1, parse_* and evaluate_*) on the same strings.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "eval/answer_extraction.h"
#include "eval/code_extraction.h"
#include "util/error.h"

namespace moeserve::eval {
namespace {

// A Harmony completion: an analysis message, then the final one.
std::string harmony(const std::string& final_text, const std::string& analysis = "Let me think.") {
  return "<|channel|>analysis<|message|>" + analysis + "<|end|><|start|>assistant<|channel|>final<|message|>" +
         final_text + "<|return|>";
}

TEST(FinalSection, TakesTheFinalChannelElseTheWholeText) {
  EXPECT_EQ(final_section(harmony("  B  ")), "B");
  EXPECT_EQ(final_section("<|channel|>final<|message|>cut short"), "cut short");
  EXPECT_EQ(final_section("<|channel|>final 明<|message|>D<|return|>"), "D");  // corrupted header tolerated
  EXPECT_EQ(final_section("  no channels at all \n"), "no channels at all");
  EXPECT_EQ(final_section("<|channel|>analysis<|message|>thinking"), "<|channel|>analysis<|message|>thinking");
}

TEST(MarkdownBold, IsStripped) {
  EXPECT_EQ(strip_markdown_bold("**Answer: C** and **D**"), "Answer: C and D");
  EXPECT_EQ(strip_markdown_bold("** unclosed"), "** unclosed");
}

struct AimeRow {
  std::string text;
  std::optional<int> parsed;
};

TEST(Aime, ParsesLikeTheReference) {
  const AimeRow rows[] = {
      {harmony(R"(The answer is \boxed{204}.)"), 204},
      {harmony(R"(\boxed{205})"), 205},
      {R"(<|channel|>analysis<|message|>so \boxed{204} is it)", 204},  // no final channel: the full text
      {harmony(R"(\boxed{204})", R"(maybe \boxed{100})"), 204},         // the last box wins
      {harmony(R"(\boxed{ 204 })"), 204},
      {harmony(R"(\boxed{204.5} Answer: 204)"), 204},  // a box that is not digits: "Answer:" instead
      {harmony("Answer: 204."), std::nullopt},         // a number followed by "." is not taken
      {harmony("answer:204"), 204},
      {harmony(R"(\boxed{1000})"), std::nullopt},  // outside 0..999
      {harmony(R"(\boxed{33})"), 33},
      {"   ", std::nullopt},
      {harmony(R"(\boxed{\frac{1}{2}})"), std::nullopt},
      {harmony(R"(\boxed{204)"), std::nullopt},
      {harmony("Answer: 7\nAnswer: 204"), 204},
      {harmony("Answer: 12abc"), std::nullopt},
      {harmony("\\boxed{\uff10\uff11}"), 1},  // full-width digits, as int() reads them
  };
  for (const AimeRow& row : rows) EXPECT_EQ(parse_aime_answer(row.text), row.parsed) << row.text;
}

TEST(Aime, ComparesAsIntegers) {
  EXPECT_TRUE(aime_correct(33, "033"));
  EXPECT_TRUE(aime_correct(204, " 204\n"));
  EXPECT_FALSE(aime_correct(3, "3.0"));
  EXPECT_FALSE(aime_correct(std::nullopt, "0"));
  EXPECT_FALSE(aime_correct(5, "6"));
}

struct ChoiceRow {
  std::string text;
  std::optional<char> parsed;
};

void expect_choices(const std::vector<ChoiceRow>& rows, char max_option, Rules rules) {
  for (const ChoiceRow& row : rows) {
    EXPECT_EQ(parse_multiple_choice(row.text, max_option, rules), row.parsed) << row.text;
  }
}

TEST(Gpqa, ParsesLikeTheReference) {
  expect_choices(
      {
          {harmony("C"), 'C'},
          {harmony("**C**"), 'C'},
          {harmony("The answer is C"), std::nullopt},  // no rule reads "is C"
          {harmony("Answer: C"), 'C'},
          {harmony("(B) because it is"), 'B'},
          {harmony("a) is wrong; Answer: C"), 'A'},  // a leading letter wins over "Answer:"
          {"Reasoning here. ANSWER: C", 'C'},        // no final channel
          {"<|channel|>analysis<|message|>FINAL ANSWER: (C)<|end|><|start|>assistant<|channel|>final<|message|>"
           "I think so.<|return|>",
           'C'},  // only the full-text rule finds it
          {harmony("answer: c"), 'C'},
          {harmony("Answer: E"), std::nullopt},  // not an option of GPQA
          {"<|channel|>final 明<|message|>D<|return|>", 'D'},
          {harmony(""), std::nullopt},
          {harmony(R"(Reasoning\nAnswer: C)"), 'C'},  // an escaped newline becomes one
          {harmony("['B']"), 'B'},
          {harmony("[']"), std::nullopt},  // the wrapper's inside is empty
          {harmony("Final answer: **D**"), 'D'},
          {harmony("\u00c9 B"), 'B'},  // É is not in [a-zA-Z]
      },
      'D', Rules::gpt_oss);
}

TEST(MmluPro, ParsesTenOptionsLikeTheReference) {
  expect_choices(
      {
          {harmony("F"), 'F'},
          {harmony("Answer: J"), 'J'},
          {"The correct option is (G).", 'G'},     // the last standalone letter (10-option rule)
          {harmony("I choose H"), 'I'},            // "I" is an option letter at the start
          {harmony("Answer: K"), std::nullopt},
          {harmony("The best fit is option G, not option A"), 'A'},
      },
      'J', Rules::gpt_oss);
}

TEST(MultipleChoice, DeepSeekRulesReadTheFullText) {
  expect_choices({{"<think>A or B?</think> ANSWER: B", 'B'},
                  {"Final Answer: (d)", 'D'},
                  {"The answer is C", std::nullopt},
                  {"['Answer: A']", 'A'}},
                 'D', Rules::deepseek_r1);
  expect_choices({{"The answer is C", 'C'}}, 'J', Rules::deepseek_r1);
}

TEST(MultipleChoice, ComparesUpperCaseLetters) {
  EXPECT_TRUE(multiple_choice_correct('C', "c", 'D'));
  EXPECT_FALSE(multiple_choice_correct('C', "C ", 'D'));  // the ground truth is not stripped
  EXPECT_FALSE(multiple_choice_correct('E', "E", 'D'));
  EXPECT_FALSE(multiple_choice_correct(std::nullopt, "A", 'D'));
}

struct CodeRow {
  std::string text;
  std::optional<std::string> gpt_oss;
  std::optional<std::string> deepseek_r1;
};

TEST(CodeExtraction, FollowsTheReferenceOrder) {
  const CodeRow rows[] = {
      {harmony("Here:\n```python\nprint(1)\n```"), "print(1)", "print(1)"},
      {harmony("```python\nx=1\n```\nand\n```python\nx=2\n```"), "x=2", "x=1"},  // last vs first block
      {harmony("```py\nprint(3)\n```"), "print(3)", std::nullopt},                // the tag line is removed
      {harmony("no code here", "```python\nprint(4)\n```"), "print(4)", "print(4)"},  // falls back to the text
      {"plain text ```python\nprint(5)\n``` end", "print(5)", "print(5)"},
      {harmony("```python3\nprint(6)\n```"), "3\nprint(6)", "3\nprint(6)"},  // lazy match keeps the "3"
      {harmony("```python\nprint(7)"), std::nullopt, std::nullopt},           // never closed
      {harmony("nothing"), std::nullopt, std::nullopt},
      {harmony("```\nprint(9)\n```", "```python\nprint(8)\n```"), "print(9)", "print(8)"},
      {harmony("```cpp\nint main(){}\n```"), "cpp\nint main(){}", std::nullopt},
  };
  for (const CodeRow& row : rows) {
    EXPECT_EQ(extract_code(row.text, Rules::gpt_oss), row.gpt_oss) << row.text;
    EXPECT_EQ(extract_code(row.text, Rules::deepseek_r1), row.deepseek_r1) << row.text;
  }
}

TEST(Boxed, TakesTheLastBalancedBox) {
  EXPECT_EQ(parse_boxed(R"(\boxed{\frac{1}{2}})"), R"(\frac{1}{2})");
  EXPECT_EQ(parse_boxed(R"(first \boxed{1} then \boxed{x^{2}})"), "x^{2}");
  EXPECT_EQ(parse_boxed(R"(\boxed{2)"), std::nullopt);
  EXPECT_EQ(parse_boxed(R"(\boxed {3})"), std::nullopt);
  EXPECT_EQ(parse_boxed(R"(\boxed{ \{1,2\} })"), R"(\{1,2\})");
}

TEST(Rules, ParseByName) {
  EXPECT_EQ(parse_rules("gpt-oss"), Rules::gpt_oss);
  EXPECT_EQ(parse_rules("deepseek-r1"), Rules::deepseek_r1);
  EXPECT_THROW(parse_rules("llama"), Error);
}

}  // namespace
}  // namespace moeserve::eval
