#include "eval/prompts.h"

namespace moeserve::eval {
namespace {

// harmonize_inputs.py MOD_PROMPT.
constexpr const char* kAnswerQuickly =
    "Do not repeat steps and output the final answer immediately once you have it. Once you have a candidate "
    "answer, do not spend more than ~100 tokens to verify it - instead, do a quick check and answer immediately. "
    "Avoid thinking for a long time. It is important to answer in as few tokens as possible.";

}  // namespace

std::string dataset_instructions(ScorerKind kind) {
  const std::string quickly = kAnswerQuickly;
  switch (kind) {
    case ScorerKind::aime:
      return "You are a math expert that solves problems step-by-step. " + quickly +
             " The final line of your response should contain the final answer as an integer enclosed in "
             "\\boxed{answer}.";
    case ScorerKind::math500:
      return "You are a math expert that solves problems step-by-step. Always show your work clearly and put your "
             "final answer in \\boxed{answer} format. " +
             quickly;
    case ScorerKind::mmlu_pro:
      return "You are an expert test-taker that answers multiple choice questions accurately. " + quickly +
             " After your reasoning, provide your final answer on a new line in the format: 'Answer: X' where X is "
             "the letter choice.";
    case ScorerKind::gpqa:
      return "You are an expert in Biology, Physics and Chemistry who answers scientific questions accurately. " +
             quickly +
             " After your reasoning, provide your final answer on a new line in the format: 'Answer: X' where X is "
             "the letter choice.";
    case ScorerKind::livecodebench:
      // No space before the paragraph: the script joins them so.
      return "You are a python coding expert that solves problems step-by-step. You must provide the reasoning to "
             "arriving at your solution and the code to solve the problem." +
             quickly + " The code should be enclosed within ```python delimiters.";
  }
  return {};
}

harmony::Conversation question_conversation(const EvalQuestion& question, harmony::ReasoningEffort effort) {
  harmony::SystemContent system;
  system.reasoning_effort = effort;
  system.conversation_start_date = "2025-09-30";
  harmony::DeveloperContent developer;
  developer.instructions = dataset_instructions(question.kind);
  harmony::Conversation conversation;
  conversation.push_back(harmony::Message{harmony::Role::system, {}, {}, {}, {}, std::move(system)});
  conversation.push_back(harmony::Message{harmony::Role::developer, {}, {}, {}, {}, std::move(developer)});
  conversation.push_back(harmony::Message::text(harmony::Role::user, question.question));
  return conversation;
}

}  // namespace moeserve::eval
