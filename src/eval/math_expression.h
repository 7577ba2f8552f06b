// The two steps of the PRM800K grader (openai/prm800k prm800k/grading/grader.py @7ecc794) that call Python
// libraries, done here without them:
//
// latex_to_text stands in for pylatexenc 2.10's LatexNodes2Text().latex_to_text on the macros answers use:
//   \frac{a}{b}, \nicefrac, \tfrac, \dfrac -> a/b (no parentheses, as pylatexenc writes '%s/%s');
//   \sqrt[n]{x} -> √(x) (the degree is dropped, as pylatexenc drops it);
//   \text, \textrm, \textbf, \textit, \emph, \mathrm, \mathbf, \mathit, \mathbb, \operatorname -> their argument;
//   Greek letters -> their character (\pi -> π); \infty ∞; \cup ∪; \cap ∩; \cdot ·; \times ×; \pm ±; \mp ∓;
//   \le \leq ≤; \ge \geq ≥; \neq ≠; \circ ∘; \in ∈; \to \rightarrow →; \ldots \dots \cdots …; \prime ';
//   \, \; \: and "\ " -> a space; \quad two; \qquad four; \! nothing; \\ a newline;
//   \{ \} \% \$ \& \# \_ -> the character; sin, cos, tan, log, ln, exp and friends -> their name;
//   \left, \right, \big... and every other macro -> nothing (a braced argument after it stays as plain text);
//   braces are dropped and $ delimiters removed (math_mode 'text').
//
// math_equal stands in for are_equal_under_sympy: where the grader asks sympy whether
// simplify((ground_truth) - (given)) == 0, this parses both sides as sympy's parse_expr would read them
// (^ as power, implicit multiplication and function application, sqrt/sin/cos/tan/log/ln/exp, pi; other letters
// are variables, runs of letters split into single-letter variables) and compares their values: at one point
// without variables, else at three fixed points for the variables, within a relative 1e-9. So 1/2 and 0.5,
// 2*sqrt(2) and sqrt(8), (x+1)^2 and x^2+2x+1 are equal, as sympy finds them. Unlike sympy's exact arithmetic,
// values within the tolerance count as equal (0.333333333333, twelve 3s, equals 1/3 here), and an identity that
// holds at the three points but not everywhere would pass (none of the forms answers take). Anything the parser
// does not read (sets, inequalities, text) is not equal, as a sympy parse error is.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace moeserve::eval {

std::string latex_to_text(std::string_view latex);

// The value of a sympy-style expression with variables bound to fixed values of trial `point` (0, 1 or 2);
// none when it does not parse or is not a finite real number.
std::optional<double> evaluate_expression(std::string_view expression, int point);

bool math_equal(std::string_view ground_truth, std::string_view given);

}  // namespace moeserve::eval
