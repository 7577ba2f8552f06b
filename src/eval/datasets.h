// Evaluation datasets: loaders for the public release formats, each question with the dataset's scorer family,
// the text the model is asked, and the ground truth its answer is compared with.
//
//   AIME       JSON lines {question|problem, answer}; answer an integer string (zero-padded in some releases).
//   MATH-500   JSON lines {problem, answer, ...}; answer LaTeX.
//   MMLU-Pro   JSON lines {id, question, choices (up to 10), answer (letter)}; the choices follow the question as
//              "A) ...", one per line, the layout of MLPerf's multiple-choice few-shot examples.
//   GPQA       the release CSV (Question, Correct Answer, Incorrect Answer 1..3, Record ID, ...); the four answers
//              are shuffled per question (a fixed permutation from the seed and the Record ID), so the correct
//              letter is known; laid out as MMLU-Pro's.
//   LiveCodeBench  release rows (livecodebench.h); the question is the problem statement, with the starter code
//              for functional problems; the ground truth is the question_id.
// The dataset's name picks its scorer by MLPerf's rule (eval_accuracy.py get_evaluator): the first of gpqa,
// mmlu_pro, math500, aime, livecodebench, mmlu that the lower-cased name contains.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "eval/livecodebench.h"

namespace moeserve::eval {

enum class ScorerKind { gpqa, mmlu_pro, math500, aime, livecodebench };
std::string_view scorer_kind_name(ScorerKind kind);
// The scorer for a dataset name; none when no key matches.
std::optional<ScorerKind> scorer_for_dataset(std::string_view dataset_name);

struct EvalQuestion {
  std::string id;            // unique within the dataset: the row's id, else its line number
  std::string dataset;       // the dataset's name, e.g. "aime25", "gpqa_diamond", "livecodebench_v6"
  ScorerKind kind = ScorerKind::aime;
  std::string question;      // the user message
  std::string ground_truth;  // integer text, option letter, LaTeX answer or LiveCodeBench question_id
  std::shared_ptr<const LcbProblem> problem;  // LiveCodeBench only
};

// By scorer kind. `dataset_name` names the questions (and must select the same scorer); gpqa_seed fixes the
// shuffle of GPQA's answers.
std::vector<EvalQuestion> load_questions(ScorerKind kind, const std::string& path, const std::string& dataset_name,
                                         uint64_t gpqa_seed = 0);

// The pieces, for tests and callers that need one format.
std::vector<std::vector<std::string>> parse_csv(std::string_view text);  // RFC 4180: quotes, "" and newlines
std::string format_choices(std::string_view question, const std::vector<std::string>& choices);
// The choice order shown for a GPQA question: a permutation of {0 correct, 1..3 incorrect}.
std::vector<int> gpqa_choice_order(uint64_t seed, std::string_view record_id);
// The question shown for a LiveCodeBench problem.
std::string lcb_question_text(const LcbProblem& problem);

}  // namespace moeserve::eval
