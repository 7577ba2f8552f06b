// Rendering conversations into token ids, harmony's way (openai/harmony src/encoding.rs @ec7606d):
//   <|start|>{role or tool name}[ to={recipient}][<|channel|>{channel}][ {content type}]<|message|>{content}<|end|>
// with <|call|> instead of <|end|> after an assistant message that has a recipient (a tool call), content types
// that start with <|constrain|> rendering it as the special token, and every text piece encoded as ordinary text
// (special-token text inside content stays text). A completion prompt ends "<|start|>assistant".
#pragma once

#include <vector>

#include "harmony/message.h"
#include "tokenizer/tokenizer.h"

namespace moeserve::harmony {

struct RenderOptions {
  // Harmony drops the analysis (chain of thought) of earlier turns: when the last assistant message of the
  // conversation is on the final channel, analysis messages before the first final message are not rendered.
  bool auto_drop_analysis = true;
};

std::vector<TokenId> render_message(const Tokenizer& tokenizer, const Message& message,
                                    bool conversation_has_function_tools = false);
std::vector<TokenId> render_conversation(const Tokenizer& tokenizer, const Conversation& conversation,
                                         const RenderOptions& options = {});
// The conversation, then "<|start|>" and the next role: what the model completes.
std::vector<TokenId> render_conversation_for_completion(const Tokenizer& tokenizer, const Conversation& conversation,
                                                        Role next_role = Role::assistant,
                                                        const RenderOptions& options = {});
// As a training example: a final-channel assistant message at the end closes with <|return|>, not <|end|>.
std::vector<TokenId> render_conversation_for_training(const Tokenizer& tokenizer, const Conversation& conversation,
                                                      const RenderOptions& options = {});

// The text of structured contents (what sits between <|message|> and <|end|>).
std::string system_content_text(const SystemContent& system, bool conversation_has_function_tools);
std::string developer_content_text(const DeveloperContent& developer);

}  // namespace moeserve::harmony
