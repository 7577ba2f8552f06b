// MATH-500 answer equivalence: the PRM800K grader that MLPerf's evaluate_math500 calls
// (openai/prm800k prm800k/grading/grader.py and math_normalize.py @7ecc794), step for step. A given answer is
// correct when
//   (a) its Hendrycks MATH normalisation equals the ground truth's (normalize_mathd), or
//   (b) its PRM800K normalisation equals the ground truth's (normalize_prm800k), or
//   (c) both split into the same number of tuple/interval elements with the same brackets, and each pair is
//       equal: fractions a/b as written (an unreduced fraction is wrong), an integer only to an integer, other
//       expressions by value (math_expression.h, where the grader asks sympy).
//
// normalize_mathd (math_normalize.py): strip; an enclosing \text{...} is unwrapped; newlines, "\!" removed;
// "\\" -> "\"; tfrac, dfrac -> frac; \left, \right removed; ^{\circ}, ^\circ (degrees) removed; "\$" removed;
// everything from "\text{ " on removed (units on the right); "\%" removed; " ." -> " 0.", "{." -> "{0.", a
// leading "." gets a 0; "k = " / "xy=" prefixes of at most two characters dropped; \sqrt3 -> \sqrt{3}; spaces
// removed; \frac12 -> \frac{1}{2}, \frac1b -> \frac{1}{b}; "0.5" -> \frac{1}{2}; "a/b" of two integers ->
// \frac{a}{b}. Where the reference raises (a second "\text{ ", "\sqrt" or "\frac" at the very end), the answer is
// kept as stripped.
//
// normalize_prm800k (grader.py _normalize): an enclosing \text{...} is unwrapped; "\%" "\$" "$" "%" removed;
// " or ", " and " -> " , "; million/billion/trillion -> *10^6/9/12; the units degree, cm, centimeter, meter,
// mile, second, minute, hour, day, week, month, year, foot, feet, inch, yard (plural, with ^N) removed;
// ^\circ removed; one pair of enclosing braces removed; ",\!" removed; a float that is an integer (within 1e-7)
// written as that integer; LaTeX converted to text (math_expression.h) with √ -> sqrt, π -> pi, ∞ -> inf,
// ∪ -> U, · and × -> *; "- " -> "-"; "7 3/4" -> "7+3/4"; spaces and braces removed; lower case; a number that
// is an integer within 1e-7 (thousands commas allowed) written as int(float(x)).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace moeserve::eval {

std::string normalize_mathd(std::string_view answer);
std::string normalize_prm800k(std::string_view answer);

// grade_answer(given_answer, ground_truth).
bool math_answers_equal(std::string_view given, std::string_view ground_truth);

// evaluate_math500: a parsed answer (parse_boxed) that is empty after stripping is wrong.
bool math500_correct(const std::optional<std::string>& parsed, std::string_view ground_truth);

}  // namespace moeserve::eval
