// The program a model wrote for a LiveCodeBench problem, extracted as MLPerf's references do (parse_code):
//   gpt_oss (language/gpt-oss-120b/eval_accuracy.py): when the text has a Harmony final section, the last
//     ```python block of that section, else its last ``` block (a leading "python"/"py" line tag removed);
//     then the same two searches over the full text;
//   deepseek_r1 (language/deepseek-r1/eval_accuracy.py): the FIRST ```python block of the full text.
// Blocks are matched lazily (```python(.*?)```), so "```python3" yields a block starting "3"; the code is
// stripped of surrounding whitespace. No block: no code (the sample fails without running).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "eval/answer_extraction.h"

namespace moeserve::eval {

std::optional<std::string> extract_code(std::string_view text, Rules rules);

}  // namespace moeserve::eval
