#include "server/r1_conversation.h"

#include <fmt/format.h>

namespace moeserve::server {

std::vector<chat::ChatTurn> r1_chat_turns(const Field& body, const RequestLimits& limits) {
  for (const char* name : {"tools", "tool_choice"})
    if (body[name].present()) body[name].fail("is not supported for DeepSeek-R1 models (its tool format is not rendered)");
  for (const char* name : {"reasoning_effort", "reasoning"})
    if (body[name].present()) body[name].fail("is not supported for DeepSeek-R1 models, which always reason");
  const Field messages_field = body["messages"];
  // Without tool calls every message is one turn: the list's bound is the conversation's.
  const std::vector<Field> messages = messages_field.items(limits.messages);
  if (messages.empty()) messages_field.fail("must be a non-empty list");
  TextBudget text(limits.text_bytes);
  std::vector<chat::ChatTurn> turns;
  for (const Field& m : messages) {
    const std::string role = m["role"].string();
    const std::string content = text.take(m["content"], content_text(m["content"]));
    if (role == "system" || role == "developer") {
      turns.push_back({chat::ChatTurn::Role::system, content});
    } else if (role == "user") {
      turns.push_back({chat::ChatTurn::Role::user, content});
    } else if (role == "assistant") {
      if (m["tool_calls"].present()) m["tool_calls"].fail("is not supported for DeepSeek-R1 models");
      turns.push_back({chat::ChatTurn::Role::assistant, content});
    } else {
      m["role"].fail(fmt::format("is '{}', which DeepSeek-R1 models do not take (system, developer, user, assistant)",
                                 role));
    }
  }
  return turns;
}

}  // namespace moeserve::server
