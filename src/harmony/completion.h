// Harmony around one generation: the prompt a user's text becomes, the tokens that stop sampling, and the
// generated ids read back as messages, analysis (chain of thought) apart from the final answer. What
// `moeserve generate --prompt` and `moeserve chat` use.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "harmony/message.h"
#include "tokenizer/tokenizer.h"

namespace moeserve::harmony {

// Sampling stops after either: <|return|> (the answer is done) or <|call|> (the assistant calls a tool).
// harmony's stop_tokens_for_assistant_actions(); <|end|> is not one, since analysis messages end with it.
std::vector<TokenId> assistant_stop_tokens();

// Harmony's default system message (SystemContent's defaults) with the given reasoning effort.
Message system_message(ReasoningEffort effort);
// That system message, then the user's prompt.
Conversation prompt_conversation(std::string prompt, ReasoningEffort effort);
// Its token ids, ending "<|start|>assistant" for the model to continue.
std::vector<TokenId> render_prompt(const Tokenizer& tokenizer, std::string prompt, ReasoningEffort effort);

struct AssistantReply {
  std::vector<Message> messages;  // in order, as parsed
  std::string analysis;           // the analysis channel's content (messages joined by newlines)
  std::string final;              // the final channel's content
  bool stopped = false;           // ended on <|return|> or <|call|> (else the output was cut short)
  std::optional<std::string> error;  // when the ids are not well-formed Harmony: what is wrong, and where
};

// Reads ids generated after a prompt that ends "<|start|>assistant". Never throws on malformed output (a model
// can produce anything): it keeps the messages parsed before the problem and says what the problem was.
AssistantReply parse_assistant_reply(const Tokenizer& tokenizer, std::span<const TokenId> generated);

}  // namespace moeserve::harmony
