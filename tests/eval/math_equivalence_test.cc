// MATH answer equivalence. The normalisation tables were produced by running the PRM800K grader's own functions
// (prm800k/grading/math_normalize.py normalize_answer, and grader.py _normalize, split_tuple, _is_frac,
// _str_is_int, should_allow_eval on inputs without LaTeX, @7ecc794) on the same strings. The LaTeX conversion and
// value comparison stand in for pylatexenc and sympy (math_expression.h); their rows follow those libraries'
// documented behaviour.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/answer_extraction.h"
#include "eval/datasets.h"
#include "eval/math_equivalence.h"
#include "eval/math_expression.h"

namespace moeserve::eval {
namespace {

const std::string kFixtures = MOESERVE_SOURCE_DIR "/tests/fixtures/eval";

struct NormalizeRow {
  std::string input;
  std::string normalized;
};

TEST(MathNormalize, HendrycksRulesMatchTheReference) {
  const std::vector<NormalizeRow> rows = {
      {R"(\text{(A)})", "(A)"},
      {" 0.5 ", R"(\frac{1}{2})"},
      {R"(\dfrac{3}{4})", R"(\frac{3}{4})"},
      {R"(\frac34)", R"(\frac{3}{4})"},
      {R"(\frac3{4})", R"(\frac{3}{4})"},
      {"3/4", R"(\frac{3}{4})"},
      {R"(10\%)", "10"},
      {R"(5 \text{ cm})", "5"},
      {R"(90^\circ)", "90"},
      {R"(90^{\circ})", "90"},
      {"x = 5", "5"},
      {R"(\left( 1, 2 \right))", "(1,2)"},
      {R"(\sqrt3)", R"(\sqrt{3})"},
      {".5", R"(\frac{1}{2})"},
      {R"(\$5)", "5"},
      {R"(k=\frac12)", R"(\frac{1}{2})"},
      {R"(\frac)", R"(\frac)"},                                   // the reference raises: input kept
      {R"(\sqrt)", R"(\sqrt)"},
      {R"(a \text{ b} \text{ c})", R"(a \text{ b} \text{ c})"},  // two unit markers: kept
      {"1/02", "1/02"},
      {"-1/2", R"(\frac{-1}{2})"},
      {R"(\frac{1}{2}\!)", R"(\frac{1}{2})"},
      {R"(2 \\ 3)", R"(2\3)"},
      {R"(\tfrac{1}{2})", R"(\frac{1}{2})"},
      {"3 .5", "30.5"},
  };
  for (const NormalizeRow& row : rows) EXPECT_EQ(normalize_mathd(row.input), row.normalized) << row.input;
}

TEST(MathNormalize, Prm800kRulesMatchTheReference) {
  const std::vector<NormalizeRow> rows = {
      {"1,000", "1000"},       {"3.0", "3"},         {"1 million", "1*10^6"}, {"2^{10}", "2^10"},
      {"(1,2)", "(1,2)"},      {"{5}", "5"},         {"5 degrees", "5"},      {"12 cm^2", "12"},
      {" 2.99999999", "3"},    {"-0.0", "0"},        {"1e3", "1000"},         {"The answer", "theanswer"},
      {"x or y", "x,y"},       {"$5$", "5"},         {"5%", "5"},             {"- 3", "-3"},
      {"7 3/4", "7+3/4"},      {"3.5", "3.5"},       {"1,000,000", "1000000"}, {"2,5", "2,5"},
      {"inf", "inf"},          {"100 seconds", "100"},
      // With LaTeX, through the pylatexenc stand-in:
      {R"(\frac{1}{2})", "1/2"}, {R"(2\sqrt{2})", "2sqrt(2)"}, {R"(-\frac{\pi}{6})", "-pi/6"},
      {R"(\text{Monday})", "mon"} /* the unit "day" goes */, {R"(\left( 3, \frac{\pi}{2} \right))", "(3,pi/2)"},
      {R"(3 \cdot 4)", "3*4"}, {R"(\infty)", "inf"}, {R"(7\frac{3}{4})", "7+3/4"},
  };
  for (const NormalizeRow& row : rows) EXPECT_EQ(normalize_prm800k(row.input), row.normalized) << row.input;
}

TEST(LatexToText, ConvertsTheCommonMacros) {
  EXPECT_EQ(latex_to_text(R"(\frac{a+b}{c})"), "a+b/c");  // no parentheses, as pylatexenc's '%s/%s'
  EXPECT_EQ(latex_to_text(R"(\sqrt[3]{8})"), "√(8)");    // the degree is dropped, as in pylatexenc
  EXPECT_EQ(latex_to_text(R"($x \le \pi$)"), "x ≤ π");
  EXPECT_EQ(latex_to_text(R"(\mathbf{v}\,\text{cm}\!)"), "v cm");
  EXPECT_EQ(latex_to_text(R"(\left[ 1, 2 \right))"), "[ 1, 2 )");
  EXPECT_EQ(latex_to_text(R"(\unknownmacro{kept})"), "kept");
}

TEST(MathExpression, EvaluatesSympyStyleExpressions) {
  EXPECT_DOUBLE_EQ(*evaluate_expression("2**3+1", 0), 9);
  EXPECT_DOUBLE_EQ(*evaluate_expression("-2^2", 0), -4);  // unary minus binds looser than power, as in Python
  EXPECT_DOUBLE_EQ(*evaluate_expression("2(3)sqrt(4)", 0), 12);
  EXPECT_DOUBLE_EQ(*evaluate_expression("1/2+0.5", 0), 1);
  EXPECT_FALSE(evaluate_expression("1/0", 0).has_value());
  EXPECT_FALSE(evaluate_expression("sqrt(-1)", 0).has_value());
  EXPECT_FALSE(evaluate_expression("(1,2)", 0).has_value());
  EXPECT_FALSE(evaluate_expression("x=1", 0).has_value());
  EXPECT_TRUE(math_equal("(x+1)^2", "x^2+2x+1"));
  EXPECT_TRUE(math_equal("x*y", "y*x"));
  EXPECT_FALSE(math_equal("x+1", "x+2"));
  EXPECT_FALSE(math_equal("pi", "3.14159"));
}

struct GradeRow {
  std::string given;
  std::string truth;
  bool equal;
};

TEST(MathEquivalence, GradesLikeThePrm800kGrader) {
  const std::vector<GradeRow> rows = {
      {"0.5", R"(\frac{1}{2})", true},
      {R"(\frac34)", R"(\dfrac{3}{4})", true},
      {"3/4", R"(\frac{3}{4})", true},
      {"10", R"(10\%)", true},
      {"5", R"(5 \text{ cm})", true},
      {"90", R"(90^\circ)", true},
      {"5", "x = 5", true},
      {"(1,2)", R"(\left( 1, 2 \right))", true},
      {R"(2\sqrt{2})", R"(\sqrt{8})", true},       // by value
      {"1000", "1,000", true},
      {"3.0", "3", true},
      {"-0.5", R"(-\frac{1}{2})", true},
      {"A", R"(\text{(A)})", true},
      {"x^2+2x+1", "(x+1)^2", true},
      {"2/4", "1/2", false},                        // an unreduced fraction is wrong
      {"[1,2]", "(1,2)", false},                    // other brackets
      {"3.14159", R"(\pi)", false},
      {"1024", "2^{10}", false},                    // an integer is compared only with an integer
      {"1000000", "1 million", false},              // "1*10^6" is not an integer to _str_is_int
      {"0.33", R"(\frac{1}{3})", false},
      {"", "5", false},
      {"-2,1", "1,-2", false},
  };
  for (const GradeRow& row : rows) {
    EXPECT_EQ(math_answers_equal(row.given, row.truth), row.equal) << row.given << " vs " << row.truth;
  }
  EXPECT_FALSE(math500_correct(std::nullopt, "5"));
  EXPECT_FALSE(math500_correct("  ", "5"));
  EXPECT_TRUE(math500_correct(" 5 ", "5"));
}

// Real MATH-500 rows (tests/fixtures/eval/math500_excerpt.jsonl): the boxed answer of each reference solution
// is graded correct against its own answer and wrong against hand-written wrong answers.
TEST(MathEquivalence, RealMath500RowsScoreRight) {
  const std::vector<EvalQuestion> rows =
      load_questions(ScorerKind::math500, kFixtures + "/math500_excerpt.jsonl", "math500");
  ASSERT_EQ(rows.size(), 29u);
  // The boxed answer of each reference solution against its own answer (right) and the next row's (wrong: the
  // excerpt's answers are all different).
  std::vector<std::optional<std::string>> boxed;
  std::ifstream in(kFixtures + "/math500_excerpt.jsonl");
  for (std::string line; std::getline(in, line);) {
    boxed.push_back(parse_boxed(nlohmann::json::parse(line).at("solution").get<std::string>()));
  }
  ASSERT_EQ(boxed.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_FALSE(rows[i].question.empty());
    EXPECT_TRUE(math500_correct(boxed[i], rows[i].ground_truth)) << rows[i].ground_truth;
    const std::string& other = rows[(i + 1) % rows.size()].ground_truth;
    EXPECT_FALSE(math500_correct(boxed[i], other)) << *boxed[i] << " vs " << other;
  }
  const std::vector<GradeRow> hand_written = {
      {R"(\left( 3, \frac{\pi}{2} \right))", rows[0].ground_truth, true},
      {R"((3, \pi/2))", rows[0].ground_truth, true},
      {R"(\left[ 3, \frac{\pi}{2} \right])", rows[0].ground_truth, false},
      {"14/3", rows[2].ground_truth, true},
      {R"(\frac{28}{6})", rows[2].ground_truth, false},
      {"Evelyn", rows[3].ground_truth, true},
      {"Bob", rows[3].ground_truth, false},
      {"90", rows[5].ground_truth, true},
      {R"(\sqrt{117})", rows[6].ground_truth, true},
      {R"(3\sqrt{12})", rows[6].ground_truth, false},
      {"5", rows[11].ground_truth, true},  // "x=5"
      {R"(\frac{5}{4})", rows[16].ground_truth, true},  // "1.25"
      {R"(-\pi/6)", rows[18].ground_truth, true},
      {R"(\frac{3}{20})", rows[19].ground_truth, true},  // "0.15"
      {"[3,4]", rows[27].ground_truth, false},           // "(3,4]"
  };
  for (const GradeRow& row : hand_written) {
    EXPECT_EQ(math_answers_equal(row.given, row.truth), row.equal) << row.given << " vs " << row.truth;
  }
}

}  // namespace
}  // namespace moeserve::eval
