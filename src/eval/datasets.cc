#include "eval/datasets.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>
#include <map>
#include <random>

#include "eval/json_lines.h"
#include "eval/python_text.h"
#include "util/bounded_read.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve::eval {
namespace {

std::string required_string(const nlohmann::json& row, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    auto it = row.find(name);
    if (it == row.end()) continue;
    if (it->is_string()) return it->get<std::string>();
    if (it->is_number_integer()) return std::to_string(it->get<long long>());
  }
  fail("the row has no {} field", *names.begin());
}

std::string row_id(const nlohmann::json& row, size_t line) {
  auto it = row.find("id");
  if (it != row.end() && it->is_string()) return it->get<std::string>();
  if (it != row.end() && it->is_number_integer()) return std::to_string(it->get<long long>());
  return std::to_string(line);
}

EvalQuestion question_for(ScorerKind kind, const std::string& dataset, std::string id, std::string text,
                          std::string truth) {
  EvalQuestion q;
  q.id = std::move(id);
  q.dataset = dataset;
  q.kind = kind;
  q.question = std::move(text);
  q.ground_truth = std::move(truth);
  return q;
}

std::vector<EvalQuestion> load_json_lines(ScorerKind kind, const std::string& path, const std::string& dataset) {
  std::vector<EvalQuestion> questions;
  for_each_json_line(path, [&](const nlohmann::json& row, size_t line) {
    MOESERVE_CHECK(row.is_object(), "the row is not a JSON object");
    if (kind == ScorerKind::mmlu_pro) {
      MOESERVE_CHECK(row.contains("choices"), "the row has no choices field");
      const auto& choices = row["choices"];
      MOESERVE_CHECK(choices.is_array() && !choices.empty() && choices.size() <= 10,
                     "choices must be a list of 1 to 10 options");
      const std::string answer = ascii_upper(required_string(row, {"answer"}));
      MOESERVE_CHECK(answer.size() == 1 && answer[0] >= 'A' && answer[0] < 'A' + static_cast<char>(choices.size()),
                     "answer \"{}\" is not one of the {} options", answer, choices.size());
      std::vector<std::string> options;
      for (const auto& c : choices) options.push_back(c.is_string() ? c.get<std::string>() : c.dump());
      questions.push_back(question_for(kind, dataset, row_id(row, line),
                                       format_choices(required_string(row, {"question"}), options), answer));
      return;
    }
    const std::string text = required_string(row, {"question", "problem"});
    std::string answer = required_string(row, {"answer"});
    if (kind == ScorerKind::aime) {
      MOESERVE_CHECK(python_int(answer).has_value(), "AIME answer \"{}\" is not an integer", answer);
    }
    questions.push_back(question_for(kind, dataset, row_id(row, line), text, std::move(answer)));
  });
  return questions;
}

std::vector<EvalQuestion> load_gpqa(const std::string& path, const std::string& dataset, uint64_t seed) {
  // GPQA's release CSVs are a few MiB.
  const std::string text = read_text_file(path, 256 * kMiB);
  std::vector<std::vector<std::string>> rows;
  try {
    rows = parse_csv(text);
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
  MOESERVE_CHECK(!rows.empty(), "{} is empty", path);
  std::map<std::string, size_t> column;
  for (size_t i = 0; i < rows[0].size(); ++i) column[std::string(python_strip(rows[0][i]))] = i;
  const auto index_of = [&](const char* name) {
    auto it = column.find(name);
    MOESERVE_CHECK(it != column.end(), "{}: no \"{}\" column", path, name);
    return it->second;
  };
  const std::array<size_t, 4> answer_columns = {index_of("Correct Answer"), index_of("Incorrect Answer 1"),
                                                index_of("Incorrect Answer 2"), index_of("Incorrect Answer 3")};
  const size_t question_column = index_of("Question");
  const auto record = column.find("Record ID");
  std::vector<EvalQuestion> questions;
  for (size_t r = 1; r < rows.size(); ++r) {
    const std::vector<std::string>& row = rows[r];
    if (row.size() == 1 && python_strip(row[0]).empty()) continue;
    MOESERVE_CHECK(row.size() == rows[0].size(), "{}: record {} has {} fields, the header {}", path, r, row.size(),
                   rows[0].size());
    const std::string id = record != column.end() ? row[record->second] : std::to_string(r);
    const std::vector<int> order = gpqa_choice_order(seed, id);
    std::vector<std::string> choices;
    char correct = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      choices.emplace_back(python_strip(row[answer_columns[static_cast<size_t>(order[i])]]));
      if (order[i] == 0) correct = static_cast<char>('A' + i);
    }
    questions.push_back(question_for(ScorerKind::gpqa, dataset, id,
                                     format_choices(python_strip(row[question_column]), choices),
                                     std::string(1, correct)));
  }
  return questions;
}

std::vector<EvalQuestion> load_lcb(const std::string& path, const std::string& dataset) {
  std::vector<EvalQuestion> questions;
  for (LcbProblem& problem : load_lcb_problems(path)) {
    auto shared = std::make_shared<const LcbProblem>(std::move(problem));
    EvalQuestion q = question_for(ScorerKind::livecodebench, dataset, shared->question_id,
                                  lcb_question_text(*shared), shared->question_id);
    q.problem = std::move(shared);
    questions.push_back(std::move(q));
  }
  return questions;
}

}  // namespace

std::string_view scorer_kind_name(ScorerKind kind) {
  switch (kind) {
    case ScorerKind::gpqa: return "gpqa";
    case ScorerKind::mmlu_pro: return "mmlu_pro";
    case ScorerKind::math500: return "math500";
    case ScorerKind::aime: return "aime";
    case ScorerKind::livecodebench: return "livecodebench";
  }
  return "?";
}

std::optional<ScorerKind> scorer_for_dataset(std::string_view dataset_name) {
  const std::string name = ascii_lower(dataset_name);
  static constexpr std::array<std::pair<std::string_view, ScorerKind>, 6> keys = {{
      {"gpqa", ScorerKind::gpqa},
      {"mmlu_pro", ScorerKind::mmlu_pro},
      {"math500", ScorerKind::math500},
      {"aime", ScorerKind::aime},
      {"livecodebench", ScorerKind::livecodebench},
      {"mmlu", ScorerKind::mmlu_pro},  // plain MMLU is scored as MMLU-Pro (options A-J)
  }};
  for (const auto& [key, kind] : keys) {
    if (name.find(key) != std::string::npos) return kind;
  }
  return std::nullopt;
}

std::vector<EvalQuestion> load_questions(ScorerKind kind, const std::string& path, const std::string& dataset_name,
                                         uint64_t gpqa_seed) {
  MOESERVE_CHECK(scorer_for_dataset(dataset_name) == kind,
                 "dataset name \"{}\" would be scored as {}, not {} (MLPerf picks the scorer from the name)",
                 dataset_name, scorer_for_dataset(dataset_name) ? scorer_kind_name(*scorer_for_dataset(dataset_name)) : "nothing",
                 scorer_kind_name(kind));
  switch (kind) {
    case ScorerKind::gpqa: return load_gpqa(path, dataset_name, gpqa_seed);
    case ScorerKind::livecodebench: return load_lcb(path, dataset_name);
    default: return load_json_lines(kind, path, dataset_name);
  }
}

std::vector<std::vector<std::string>> parse_csv(std::string_view text) {
  std::vector<std::vector<std::string>> rows(1);
  std::string field;
  bool quoted = false;
  bool field_started = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field.push_back('"');
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field.push_back(c);
      }
    } else if (c == '"' && !field_started) {
      quoted = field_started = true;
    } else if (c == ',') {
      rows.back().push_back(std::move(field));
      field.clear();
      field_started = false;
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      rows.back().push_back(std::move(field));
      field.clear();
      field_started = false;
      rows.emplace_back();
    } else {
      field.push_back(c);
      field_started = true;
    }
  }
  MOESERVE_CHECK(!quoted, "CSV: a quoted field is not closed");
  if (field_started || !rows.back().empty()) {
    rows.back().push_back(std::move(field));
  } else {
    rows.pop_back();
  }
  return rows;
}

std::string format_choices(std::string_view question, const std::vector<std::string>& choices) {
  std::string text(question);
  for (size_t i = 0; i < choices.size(); ++i) text += fmt::format("\n{}) {}", static_cast<char>('A' + i), choices[i]);
  return text;
}

std::vector<int> gpqa_choice_order(uint64_t seed, std::string_view record_id) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : record_id) h = (h ^ c) * 1099511628211ull;
  std::mt19937_64 random(h);  // its output sequence is fixed by the standard; only the raw outputs are used
  std::vector<int> order = {0, 1, 2, 3};
  for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[random() % (i + 1)]);
  return order;
}

std::string lcb_question_text(const LcbProblem& problem) {
  // lcb_runner/prompts/code_generation.py get_generic_question_template_answer (@b1e7cab).
  std::string text = fmt::format("### Question:\n{}\n\n", problem.question_content);
  if (!problem.starter_code.empty()) {
    text += "### Format: You will use the following starter code to write the solution to the problem and enclose "
            "your code within delimiters.\n";
    text += fmt::format("```python\n{}\n```\n\n", problem.starter_code);
  } else {
    text += "### Format: Read the inputs from stdin solve the problem and write the answer to stdout (do not "
            "directly test on the sample inputs). Enclose your code within delimiters as follows. Ensure that when "
            "the python program runs, it reads the inputs, runs the algorithm and writes output to STDOUT.\n";
    text += "```python\n# YOUR CODE HERE\n```\n\n";
  }
  text += "### Answer: (use the provided format with backticks)\n\n";
  return text;
}

}  // namespace moeserve::eval
