#include "server/r1_conversation.h"

#include <fmt/format.h>

#include "server/request_fields.h"

namespace moeserve::server {

using nlohmann::json;

std::vector<chat::ChatTurn> r1_chat_turns(const json& body) {
  for (const char* field : {"tools", "tool_choice"})
    if (body.contains(field) && !body[field].is_null())
      throw bad_request(fmt::format("'{}' is not supported for DeepSeek-R1 models (its tool format is not rendered)",
                                    field),
                        field);
  for (const char* field : {"reasoning_effort", "reasoning"})
    if (body.contains(field) && !body[field].is_null())
      throw bad_request(fmt::format("'{}' is not supported for DeepSeek-R1 models, which always reason", field), field);
  std::vector<chat::ChatTurn> turns;
  for_each_chat_message(body, [&](const std::string& role, const std::string& text, const json& m,
                                  const std::string& where) {
    if (role == "system" || role == "developer") {
      turns.push_back({chat::ChatTurn::Role::system, text});
    } else if (role == "user") {
      turns.push_back({chat::ChatTurn::Role::user, text});
    } else if (role == "assistant") {
      if (m.contains("tool_calls") && !m["tool_calls"].is_null())
        throw bad_request(where + ": tool calls are not supported for DeepSeek-R1 models", "messages");
      turns.push_back({chat::ChatTurn::Role::assistant, text});
    } else {
      throw bad_request(fmt::format("{}: role '{}' is not supported for DeepSeek-R1 models (system, developer, user, "
                                    "assistant)",
                                    where, role),
                        "messages");
    }
  });
  return turns;
}

}  // namespace moeserve::server
