#include "eval/code_extraction.h"

#include "eval/python_text.h"
#include "eval/regex.h"

namespace moeserve::eval {
namespace {

const Regex& python_block() {
  static const Regex pattern("```python(.*?)```", Regex::kDotAll);
  return pattern;
}

// The last ```python block, else the last ``` block without its language tag line.
std::optional<std::string> last_block(std::string_view text) {
  if (auto m = python_block().last(text)) return std::string(python_strip(m->group(1)));
  static const Regex plain("```(.*?)```", Regex::kDotAll);
  static const Regex language_tag("^(?:python|py)\\s*\\n", Regex::kIgnoreCase);
  if (auto m = plain.last(text)) return language_tag.substitute(python_strip(m->group(1)), "");
  return std::nullopt;
}

}  // namespace

std::optional<std::string> extract_code(std::string_view text, Rules rules) {
  text = python_strip(text);
  if (text.empty()) return std::nullopt;
  if (rules == Rules::deepseek_r1) {
    if (auto m = python_block().search(text)) return std::string(python_strip(m->group(1)));
    return std::nullopt;
  }
  const std::string section = final_section(text);
  if (section != text) {
    if (auto code = last_block(section)) return code;
  }
  return last_block(text);
}

}  // namespace moeserve::eval
