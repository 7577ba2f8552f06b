#include "server/conversation.h"

#include <fmt/format.h>

#include <map>

namespace moeserve::server {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// Turns (tool calls included) counted against limits.messages.
class TurnCount {
 public:
  explicit TurnCount(size_t limit) : limit_(limit) {}
  void add(const Field& where) {
    if (++turns_ > limit_) where.fail(fmt::format("makes the conversation longer than {} messages", limit_));
  }

 private:
  size_t limit_;
  size_t turns_ = 0;
};

harmony::ReasoningEffort reasoning_effort(const Field& body) {
  Field field = body["reasoning_effort"];
  if (!field.present()) field = body["reasoning"]["effort"];
  const std::optional<std::string> effort = field.optional_string();
  if (!effort) return harmony::ReasoningEffort::medium;
  if (*effort != "low" && *effort != "medium" && *effort != "high")
    field.fail(fmt::format("is '{}'; it must be low, medium or high", *effort));
  return harmony::parse_reasoning_effort(*effort);
}

// A schema as harmony renders it (ordered_json). Objects are appended to directly: their keys are unique already,
// and ordered_json's own insertion searches the keys every time (quadratic in a schema with many properties).
// Recursion is bounded by the body's depth limit.
ordered_json to_ordered(const json& value) {
  if (value.is_object()) {
    ordered_json out = ordered_json::object();
    auto& members = out.get_ref<ordered_json::object_t&>();
    for (const auto& [key, member] : value.items()) members.emplace_back(key, to_ordered(member));
    return out;
  }
  if (value.is_array()) {
    ordered_json out = ordered_json::array();
    for (const json& element : value) out.push_back(to_ordered(element));
    return out;
  }
  return ordered_json(value);
}

// Chat completions nest the function ({"type": "function", "function": {...}}); the Responses API does not.
std::vector<harmony::ToolDescription> function_tools(const Field& body, bool nested, const RequestLimits& limits,
                                                     TextBudget& text) {
  std::vector<harmony::ToolDescription> tools;
  size_t schema_bytes = 0;
  for (const Field& tool : body["tools"].items(limits.tools)) {
    const std::string type = tool["type"].string();
    if (type != "function") tool["type"].fail(fmt::format("is '{}'; only tools of type 'function' are supported", type));
    const Field f = nested ? tool["function"] : tool;
    harmony::ToolDescription d;
    d.name = text.take(f["name"], f["name"].string());
    if (d.name.empty()) f["name"].fail("must not be empty");
    d.description = text.take(f["description"], f["description"].optional_string().value_or(""));
    const Field parameters = f["parameters"];
    if (parameters.present()) {
      if (!parameters.is_object()) parameters.fail("must be a JSON schema object");
      schema_bytes += parameters.json().dump().size();
      if (schema_bytes > limits.tool_schema_bytes)
        parameters.fail(fmt::format("brings the tools' parameter schemas past {} bytes", limits.tool_schema_bytes));
      d.parameters = to_ordered(parameters.json());
    }
    tools.push_back(std::move(d));
  }
  return tools;
}

// tool_choice: "auto" and "none"; on chat also "required" and {"type": "function", "function": {"name"}}, which
// name the tool the answer must call (forced: constrained decoding writes its arguments). "required" with more
// than one tool would need the model to choose a name under constraint, which is not done: a 400 says so.
bool tools_enabled(const Field& body, const std::vector<harmony::ToolDescription>& tools, bool chat,
                   std::optional<harmony::ToolDescription>& forced) {
  const Field choice = body["tool_choice"];
  if (!choice.present()) return true;
  const std::optional<std::string> mode = choice.is_string() ? choice.optional_string() : std::nullopt;
  if (mode == "none") return false;
  if (mode == "auto") return true;
  if (!chat) choice.fail("must be 'auto' or 'none' (forcing a tool call is supported on chat completions)");
  if (mode == "required") {
    if (tools.size() != 1)
      choice.fail(fmt::format("is 'required' with {} tools; name the one to call ({{\"type\": \"function\", "
                              "\"function\": {{\"name\": ...}}}}): a choice among several is not supported",
                              tools.size()));
    forced = tools.front();
    return true;
  }
  if (!choice.is_object() || choice["type"].string() != "function")
    choice.fail("must be 'auto', 'none', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}");
  const std::string name = choice["function"]["name"].string();
  for (const harmony::ToolDescription& tool : tools)
    if (tool.name == name) forced = tool;
  if (!forced) choice["function"]["name"].fail(fmt::format("is '{}', which is not one of the request's tools", name));
  return true;
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

// The tool calls of a chat assistant message, each remembered by its id for the tool results that answer it.
void assistant_tool_calls(const Field& message, TextBudget& text, TurnCount& turns, harmony::Conversation& out,
                          std::map<std::string, std::string>& tool_names) {
  for (const Field& call : message["tool_calls"].items()) {
    turns.add(call);
    if (const auto type = call["type"].optional_string(); type && *type != "function")
      call["type"].fail(fmt::format("is '{}'; only function tool calls are supported", *type));
    const Field function = call["function"];
    const std::string name = text.take(function["name"], function["name"].string());
    const std::string arguments = text.take(function["arguments"], function["arguments"].optional_string().value_or("{}"));
    if (const auto id = call["id"].optional_string()) tool_names[*id] = name;
    out.push_back(tool_call_message(name, arguments));
  }
}

}  // namespace

ConversationRequest chat_conversation(const Field& body, const RequestLimits& limits) {
  const Field messages_field = body["messages"];
  const std::vector<Field> messages = messages_field.items(limits.messages);
  if (messages.empty()) messages_field.fail("must be a non-empty list");
  TextBudget text(limits.text_bytes);
  TurnCount turns(limits.messages);
  std::string instructions;
  harmony::Conversation conversation;
  std::map<std::string, std::string> tool_names;  // tool_call_id -> function name
  for (const Field& m : messages) {
    turns.add(m);
    const std::string role = m["role"].string();
    const std::string content = text.take(m["content"], content_text(m["content"]));
    if (role == "system" || role == "developer") {
      append_instructions(instructions, content);
    } else if (role == "user") {
      conversation.push_back(harmony::Message::text(harmony::Role::user, content));
    } else if (role == "assistant") {
      const Field reasoning_field = m["reasoning_content"].present() ? m["reasoning_content"] : m["reasoning"];
      const std::string reasoning = text.take(reasoning_field, reasoning_field.optional_string().value_or(""));
      if (!reasoning.empty())
        conversation.push_back(harmony::Message::text(harmony::Role::assistant, reasoning).with_channel("analysis"));
      if (!content.empty())
        conversation.push_back(harmony::Message::text(harmony::Role::assistant, content).with_channel("final"));
      assistant_tool_calls(m, text, turns, conversation, tool_names);
    } else if (role == "tool") {
      std::optional<std::string> name = m["name"].optional_string();
      if (!name) {
        const auto id = m["tool_call_id"].optional_string();
        if (!id || !tool_names.contains(*id))
          m["tool_call_id"].fail("must be the id of an earlier assistant tool call");
        name = tool_names[*id];
      }
      conversation.push_back(tool_result_message(*name, content));
    } else {
      m["role"].fail(fmt::format("is an unknown role '{}'", role));
    }
  }
  auto tools = function_tools(body, true, limits, text);
  std::optional<harmony::ToolDescription> forced;
  if (!tools_enabled(body, tools, /*chat=*/true, forced)) tools.clear();
  ConversationRequest out = assemble(reasoning_effort(body), instructions, std::move(tools), std::move(conversation));
  out.forced_tool = std::move(forced);
  return out;
}

ConversationRequest responses_conversation(const Field& body, const RequestLimits& limits) {
  TextBudget text(limits.text_bytes);
  TurnCount turns(limits.messages);
  std::string instructions = text.take(body["instructions"], body["instructions"].optional_string().value_or(""));
  harmony::Conversation conversation;
  const Field input = body["input"];
  if (input.is_string()) {
    conversation.push_back(harmony::Message::text(harmony::Role::user, text.take(input, input.string())));
  } else {
    if (!input.is_array()) input.fail(input.present() ? "must be a string or a list of items" : "is required");
    std::map<std::string, std::string> tool_names;  // call_id -> function name
    for (const Field& item : input.items(limits.messages)) {
      turns.add(item);
      const std::string type = item["type"].optional_string().value_or("message");
      if (type == "message") {
        const std::string role = item["role"].string();
        const std::string content = text.take(item["content"], content_text(item["content"]));
        if (role == "system" || role == "developer")
          append_instructions(instructions, content);
        else if (role == "user")
          conversation.push_back(harmony::Message::text(harmony::Role::user, content));
        else if (role == "assistant")
          conversation.push_back(harmony::Message::text(harmony::Role::assistant, content).with_channel("final"));
        else
          item["role"].fail(fmt::format("is an unknown role '{}'", role));
      } else if (type == "reasoning") {
        const std::string reasoning = text.take(item["content"], content_text(item["content"]));
        conversation.push_back(harmony::Message::text(harmony::Role::assistant, reasoning).with_channel("analysis"));
      } else if (type == "function_call") {
        const std::string name = text.take(item["name"], item["name"].string());
        if (const auto id = item["call_id"].optional_string()) tool_names[*id] = name;
        conversation.push_back(tool_call_message(
            name, text.take(item["arguments"], item["arguments"].optional_string().value_or("{}"))));
      } else if (type == "function_call_output") {
        const auto id = item["call_id"].optional_string();
        if (!id || !tool_names.contains(*id)) item["call_id"].fail("must be the call_id of an earlier function_call");
        conversation.push_back(
            tool_result_message(tool_names[*id], text.take(item["output"], item["output"].optional_string().value_or(""))));
      } else {
        item["type"].fail(fmt::format("is '{}', an unsupported input item type", type));
      }
    }
  }
  auto tools = function_tools(body, false, limits, text);
  std::optional<harmony::ToolDescription> forced;
  if (!tools_enabled(body, tools, /*chat=*/false, forced)) tools.clear();
  return assemble(reasoning_effort(body), instructions, std::move(tools), std::move(conversation));
}

}  // namespace moeserve::server
