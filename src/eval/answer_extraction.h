// Answer extraction and comparison for the math and multiple-choice datasets, rule for rule as MLPerf's
// references score them:
//   gpt_oss:     mlcommons/inference language/gpt-oss-120b/eval_accuracy.py (b66003e1), the text decoded with
//                special tokens kept, so the Harmony channels are visible;
//   deepseek_r1: mlcommons/inference language/deepseek-r1/eval_accuracy.py (b66003e1), the text decoded with
//                special tokens skipped.
// Every input is first stripped of surrounding whitespace (validate_text_input: str(text).strip()).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace moeserve::eval {

enum class Rules { gpt_oss, deepseek_r1 };
std::string_view rules_name(Rules rules);
Rules parse_rules(std::string_view name);  // "gpt-oss" or "deepseek-r1"

// extract_final_section: the content of the first `<|channel|>final...<|message|>` section up to <|return|> or
// the end (stripped), or the whole text when there is none. Characters between "final" and <|message|> are
// allowed (`final[^<]*`), as the reference tolerates corrupted headers.
std::string final_section(std::string_view text);

// strip_markdown_bold: **x** -> x.
std::string strip_markdown_bold(std::string_view text);

// parse_aime_answer, over the FULL text (not only the final section): the last \boxed{N}; else the last
// "Answer: N" (case-insensitive, N not followed by "."). An integer in 0..999, else no answer.
std::optional<int> parse_aime_answer(std::string_view text);
// evaluate_aime: int(parsed) == int(ground_truth); a ground truth that is not an integer is never matched.
// Digits of any script count, as int() reads them.
bool aime_correct(std::optional<int> parsed, std::string_view ground_truth);

// parse_multiple_choice with options A..max_option ('D' for GPQA, 'J' for MMLU-Pro). gpt_oss rules:
//   1. in the final section (bold stripped), a leading option letter: ^[^a-zA-Z]*([A-X])(?:[^a-zA-Z]|$);
//   2. else the first `Answer[:.]? X` in the final section;
//   3. else the last `ANSWER|FINAL ANSWER [:=] (X)` in the full text;
//   4. for max_option 'J' only, else the last standalone letter \b[A-J]\b of the final section.
// deepseek_r1 rules: steps 3 and 4 over the full text. All case-insensitive; the result is upper case.
std::optional<char> parse_multiple_choice(std::string_view text, char max_option, Rules rules);
// evaluate_multiple_choice: parsed is one of A..max_option and equals the ground truth, both upper-cased.
bool multiple_choice_correct(std::optional<char> parsed, std::string_view ground_truth, char max_option);

// parse_boxed_math: the content of the LAST "\boxed{" up to its matching brace (stripped); none when the braces
// do not close.
std::optional<std::string> parse_boxed(std::string_view text);

}  // namespace moeserve::eval
