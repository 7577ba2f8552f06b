// OpenAI chat messages (and Responses API input) as a Harmony conversation, the way GPT-OSS servers map them:
//  - system and developer messages become the developer message's instructions (harmony's system message is
//    the server's: identity, knowledge cutoff, reasoning effort, channels);
//  - function tools go into the developer message as harmony's `namespace functions`;
//  - an assistant message's reasoning_content (or reasoning) is an analysis-channel message, its content a
//    final-channel message, each tool call a commentary-channel message to functions.NAME with content type
//    <|constrain|>json, ending in <|call|>;
//  - a tool result (role tool, tool_call_id) is a message from functions.NAME to the assistant on commentary.
// Every field is read through request_fields.h (a wrong type is a 400 naming its path), and the request's
// limits (messages, tools, tool schema bytes, text bytes) are checked here, before anything is rendered.
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include <string>

#include "harmony/message.h"
#include "server/request_fields.h"

namespace moeserve::server {

struct ConversationRequest {
  harmony::Conversation conversation;
  bool has_function_tools = false;
  // tool_choice "required" (one tool) or a named function: the tool the answer calls.
  std::optional<harmony::ToolDescription> forced_tool;
};

// The chat completions "messages", "tools", "tool_choice" and "reasoning_effort" (or "reasoning": {"effort"}).
ConversationRequest chat_conversation(const Field& body, const RequestLimits& limits);

// The Responses API "input" (a string or a list of messages / function_call / function_call_output items),
// "instructions", "tools" and "reasoning": {"effort"}.
ConversationRequest responses_conversation(const Field& body, const RequestLimits& limits);

}  // namespace moeserve::server
