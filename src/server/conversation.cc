#include "server/conversation.h"

#include <fmt/format.h>

#include <map>

#include "server/request_fields.h"
#include "util/error.h"

namespace moeserve::server {

using nlohmann::json;

namespace {

harmony::ReasoningEffort reasoning_effort(const json& body) {
  std::optional<std::string> effort = optional_string(body, "reasoning_effort");
  if (!effort && body.contains("reasoning") && body["reasoning"].is_object())
    effort = optional_string(body["reasoning"], "effort");
  if (!effort) return harmony::ReasoningEffort::medium;
  if (*effort != "low" && *effort != "medium" && *effort != "high")
    throw bad_request(fmt::format("reasoning effort '{}' must be low, medium or high", *effort), "reasoning_effort");
  return harmony::parse_reasoning_effort(*effort);
}

// Chat completions nest the function ({"type": "function", "function": {...}}); the Responses API does not.
std::vector<harmony::ToolDescription> function_tools(const json& body, bool nested) {
  std::vector<harmony::ToolDescription> tools;
  if (!body.contains("tools") || body["tools"].is_null()) return tools;
  if (!body["tools"].is_array()) throw bad_request("'tools' must be a list", "tools");
  for (const auto& tool : body["tools"]) {
    if (!tool.is_object() || tool.value("type", "") != "function")
      throw bad_request("only tools of type 'function' are supported", "tools");
    const json& f = nested ? tool.value("function", json()) : tool;
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
      throw bad_request("every function tool needs a 'name'", "tools");
    harmony::ToolDescription d;
    d.name = f["name"];
    d.description = optional_string(f, "description").value_or("");
    if (f.contains("parameters") && !f["parameters"].is_null()) {
      if (!f["parameters"].is_object()) throw bad_request("a tool's 'parameters' must be a JSON schema object", "tools");
      d.parameters = nlohmann::ordered_json::parse(f["parameters"].dump());
    }
    tools.push_back(std::move(d));
  }
  return tools;
}

bool tools_enabled(const json& body) {
  if (!body.contains("tool_choice") || body["tool_choice"].is_null()) return true;
  const json& choice = body["tool_choice"];
  if (choice == "none") return false;
  if (choice == "auto") return true;
  // Forcing a call needs constrained decoding, which the engine does not do: say so instead of ignoring it.
  throw bad_request("tool_choice must be 'auto' or 'none' (forcing a tool call is not supported)", "tool_choice");
}

ConversationRequest assemble(harmony::ReasoningEffort effort, std::string instructions,
                             std::vector<harmony::ToolDescription> tools, harmony::Conversation turns) {
  ConversationRequest out;
  harmony::SystemContent system;
  system.reasoning_effort = effort;
  out.conversation.push_back(harmony::Message{harmony::Role::system, {}, {}, {}, {}, system});
  if (!instructions.empty() || !tools.empty()) {
    harmony::DeveloperContent developer;
    if (!instructions.empty()) developer.instructions = instructions;
    if (!tools.empty()) developer.with_function_tools(std::move(tools));
    out.has_function_tools = developer.has_function_tools();
    out.conversation.push_back(harmony::Message{harmony::Role::developer, {}, {}, {}, {}, developer});
  }
  out.conversation.insert(out.conversation.end(), std::make_move_iterator(turns.begin()),
                          std::make_move_iterator(turns.end()));
  return out;
}

harmony::Message tool_call_message(const std::string& name, std::string arguments) {
  return harmony::Message::text(harmony::Role::assistant, std::move(arguments))
      .with_channel("commentary")
      .with_recipient("functions." + name)
      .with_content_type("<|constrain|>json");
}

harmony::Message tool_result_message(const std::string& name, std::string output) {
  return harmony::Message::from_tool("functions." + name, std::move(output))
      .with_channel("commentary")
      .with_recipient("assistant");
}

void append_instructions(std::string& instructions, const std::string& text) {
  if (text.empty()) return;
  if (!instructions.empty()) instructions += "\n\n";
  instructions += text;
}

}  // namespace

ConversationRequest chat_conversation(const json& body) {
  std::string instructions;
  harmony::Conversation turns;
  std::map<std::string, std::string> tool_names;  // tool_call_id -> function name
  for_each_chat_message(body, [&](const std::string& role, const std::string& text, const json& m,
                                  const std::string& where) {
    if (role == "system" || role == "developer") {
      append_instructions(instructions, text);
    } else if (role == "user") {
      turns.push_back(harmony::Message::text(harmony::Role::user, text));
    } else if (role == "assistant") {
      std::optional<std::string> reasoning = optional_string(m, "reasoning_content");
      if (!reasoning) reasoning = optional_string(m, "reasoning");
      if (reasoning && !reasoning->empty())
        turns.push_back(harmony::Message::text(harmony::Role::assistant, *reasoning).with_channel("analysis"));
      if (!text.empty()) turns.push_back(harmony::Message::text(harmony::Role::assistant, text).with_channel("final"));
      if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
        if (!m["tool_calls"].is_array()) throw bad_request(where + ".tool_calls must be a list", "messages");
        for (const auto& call : m["tool_calls"]) {
          const json f = call.is_object() ? call.value("function", json()) : json();
          if (!f.is_object() || !f.contains("name") || !f["name"].is_string())
            throw bad_request(where + ": every tool call needs function.name", "messages");
          const std::string arguments = optional_string(f, "arguments").value_or("{}");
          if (call.contains("id") && call["id"].is_string()) tool_names[call["id"]] = f["name"];
          turns.push_back(tool_call_message(f["name"], arguments));
        }
      }
    } else if (role == "tool") {
      std::optional<std::string> name = optional_string(m, "name");
      if (!name) {
        const auto id = optional_string(m, "tool_call_id");
        if (!id || !tool_names.contains(*id))
          throw bad_request(where + ": a tool message needs the tool_call_id of an earlier assistant tool call",
                            "messages");
        name = tool_names[*id];
      }
      turns.push_back(tool_result_message(*name, text));
    } else {
      throw bad_request(fmt::format("{}: unknown role '{}'", where, role), "messages");
    }
  });
  auto tools = function_tools(body, true);
  if (!tools_enabled(body)) tools.clear();
  return assemble(reasoning_effort(body), instructions, std::move(tools), std::move(turns));
}

ConversationRequest responses_conversation(const json& body) {
  std::string instructions = optional_string(body, "instructions").value_or("");
  harmony::Conversation turns;
  if (!body.contains("input") || body["input"].is_null()) throw bad_request("'input' is required", "input");
  const json& input = body["input"];
  if (input.is_string()) {
    turns.push_back(harmony::Message::text(harmony::Role::user, input.get<std::string>()));
  } else if (input.is_array()) {
    std::map<std::string, std::string> tool_names;  // call_id -> function name
    for (size_t i = 0; i < input.size(); ++i) {
      const json& item = input[i];
      const std::string where = fmt::format("input[{}]", i);
      if (!item.is_object()) throw bad_request(where + " must be an object", "input");
      const std::string type = item.value("type", "message");
      if (type == "message") {
        const std::string role = item.value("role", "");
        const std::string text = content_text(item.value("content", json()), where + ".content");
        if (role == "system" || role == "developer")
          append_instructions(instructions, text);
        else if (role == "user")
          turns.push_back(harmony::Message::text(harmony::Role::user, text));
        else if (role == "assistant")
          turns.push_back(harmony::Message::text(harmony::Role::assistant, text).with_channel("final"));
        else
          throw bad_request(fmt::format("{}: unknown role '{}'", where, role), "input");
      } else if (type == "reasoning") {
        std::string text;
        if (item.contains("content") && item["content"].is_array()) text = content_text(item["content"], where);
        turns.push_back(harmony::Message::text(harmony::Role::assistant, text).with_channel("analysis"));
      } else if (type == "function_call") {
        const auto name = optional_string(item, "name");
        if (!name) throw bad_request(where + ": a function_call needs a name", "input");
        if (const auto id = optional_string(item, "call_id")) tool_names[*id] = *name;
        turns.push_back(tool_call_message(*name, optional_string(item, "arguments").value_or("{}")));
      } else if (type == "function_call_output") {
        const auto id = optional_string(item, "call_id");
        if (!id || !tool_names.contains(*id))
          throw bad_request(where + ": function_call_output needs the call_id of an earlier function_call", "input");
        turns.push_back(tool_result_message(tool_names[*id], optional_string(item, "output").value_or("")));
      } else {
        throw bad_request(fmt::format("{}: unsupported input item type '{}'", where, type), "input");
      }
    }
  } else {
    throw bad_request("'input' must be a string or a list of items", "input");
  }
  auto tools = function_tools(body, false);
  if (!tools_enabled(body)) tools.clear();
  return assemble(reasoning_effort(body), instructions, std::move(tools), std::move(turns));
}

}  // namespace moeserve::server
