// The chat format eval and specbench speak to a model in: Harmony for gpt-oss, DeepSeek-R1's template for the
// DeepSeek-V3 family (a tokenizer with R1's chat tokens). Both build Harmony conversations (a system message, the
// dataset's developer instructions, user turns, earlier replies' final text); R1 gets them as its turns: the
// instructions join the first user message (R1's advice: no system prompt, every instruction in the user prompt),
// Harmony's system message and analysis have no R1 counterpart, final messages are assistant turns. A reply is
// read back as MLPerf's scorer of that model reads it: gpt-oss's decoded with special tokens by name, R1's with
// them skipped (eval_accuracy.py's skip_special_tokens=True).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "chat/r1_chat.h"
#include "harmony/message.h"
#include "tokenizer/tokenizer.h"

namespace moeserve::eval {

std::vector<chat::ChatTurn> r1_turns(const harmony::Conversation& conversation);

class EvalChatFormat {
 public:
  // R1's format when the tokenizer has R1's chat tokens, else Harmony.
  explicit EvalChatFormat(const Tokenizer& tokenizer);

  bool r1() const { return r1_; }
  std::vector<TokenId> render(const harmony::Conversation& conversation) const;
  // Sampling stops after one of these: Harmony's end of an assistant turn, or R1's end of sentence.
  const std::vector<TokenId>& stop_tokens() const { return stop_tokens_; }
  // The reply's text for the scorer.
  std::string scored_text(std::span<const TokenId> reply) const;
  // What of a reply goes into a conversation's history: the final channel, or R1's content after </think>.
  std::string answer(std::span<const TokenId> reply) const;

 private:
  const Tokenizer& tokenizer_;
  bool r1_;
  std::vector<TokenId> stop_tokens_;
};

}  // namespace moeserve::eval
