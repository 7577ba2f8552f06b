#include "harmony/message.h"

#include "util/error.h"

namespace moeserve::harmony {

std::string_view role_name(Role role) {
  switch (role) {
    case Role::user: return "user";
    case Role::assistant: return "assistant";
    case Role::system: return "system";
    case Role::developer: return "developer";
    case Role::tool: return "tool";
  }
  return "";
}

std::optional<Role> role_from_name(std::string_view name) {
  for (Role r : {Role::user, Role::assistant, Role::system, Role::developer, Role::tool}) {
    if (role_name(r) == name) return r;
  }
  return std::nullopt;
}

std::string_view reasoning_effort_name(ReasoningEffort effort) {
  switch (effort) {
    case ReasoningEffort::low: return "low";
    case ReasoningEffort::medium: return "medium";
    case ReasoningEffort::high: return "high";
  }
  return "";
}

ReasoningEffort parse_reasoning_effort(std::string_view name) {
  for (ReasoningEffort e : {ReasoningEffort::low, ReasoningEffort::medium, ReasoningEffort::high}) {
    if (reasoning_effort_name(e) == name) return e;
  }
  fail("reasoning effort must be low, medium or high, not \"{}\"", name);
}

// The texts below are harmony's (src/chat.rs @ec7606d), which GPT-OSS was trained with.
ToolNamespace ToolNamespace::browser() {
  using nlohmann::ordered_json;
  return ToolNamespace{
      "browser",
      "Tool for browsing.\n"
      "The `cursor` appears in brackets before each browsing display: `[{cursor}]`.\n"
      "Cite information from the tool using the following format:\n"
      "`【{cursor}†L{line_start}(-L{line_end})?】`, for example: `【6†L9-L11】` or `【8†L3】`.\n"
      "Do not quote more than 10 words directly from the tool output.\n"
      "sources=web (default: web)",
      {
          {"search", "Searches for information related to `query` and displays `topn` results.",
           ordered_json::parse(R"({"type": "object", "properties": {"query": {"type": "string"},
               "topn": {"type": "number", "default": 10}, "source": {"type": "string"}}, "required": ["query"]})")},
          {"open",
           "Opens the link `id` from the page indicated by `cursor` starting at line number `loc`, showing "
           "`num_lines` lines.\n"
           "Valid link ids are displayed with the formatting: `【{id}†.*】`.\n"
           "If `cursor` is not provided, the most recent page is implied.\n"
           "If `id` is a string, it is treated as a fully qualified URL associated with `source`.\n"
           "If `loc` is not provided, the viewport will be positioned at the beginning of the document or centered "
           "on the most relevant passage, if available.\n"
           "Use this function without `id` to scroll to a new location of an opened page.",
           ordered_json::parse(R"({"type": "object", "properties": {
               "id": {"type": ["number", "string"], "default": -1},
               "cursor": {"type": "number", "default": -1}, "loc": {"type": "number", "default": -1},
               "num_lines": {"type": "number", "default": -1},
               "view_source": {"type": "boolean", "default": false}, "source": {"type": "string"}}})")},
          {"find", "Finds exact matches of `pattern` in the current page, or the page given by `cursor`.",
           ordered_json::parse(R"({"type": "object", "properties": {"pattern": {"type": "string"},
               "cursor": {"type": "number", "default": -1}}, "required": ["pattern"]})")},
      }};
}

ToolNamespace ToolNamespace::python() {
  return ToolNamespace{
      "python",
      "Use this tool to execute Python code in your chain of thought. The code will not be shown to the user. This "
      "tool should be used for internal reasoning, but not for code that is intended to be visible to the user "
      "(e.g. when creating plots, tables, or files).\n\n"
      "When you send a message containing Python code to python, it will be executed in a stateful Jupyter "
      "notebook environment. python will respond with the output of the execution or time out after 120.0 "
      "seconds. The drive at '/mnt/data' can be used to save and persist user files. Internet access for this "
      "session is UNKNOWN. Depends on the cluster.",
      {}};
}

SystemContent& SystemContent::with_tools(ToolNamespace ns) {
  tools[ns.name] = std::move(ns);
  return *this;
}

DeveloperContent& DeveloperContent::with_function_tools(std::vector<ToolDescription> functions) {
  tools["functions"] = ToolNamespace{"functions", std::nullopt, std::move(functions)};
  return *this;
}

bool DeveloperContent::has_function_tools() const {
  const auto it = tools.find("functions");
  return it != tools.end() && !it->second.tools.empty();
}

const std::string& Message::text_content() const {
  static const std::string empty;
  const auto* text = std::get_if<std::string>(&content);
  return text != nullptr ? *text : empty;
}

bool Message::operator==(const Message& other) const {
  // Structured contents compare by kind only: the parser yields text messages, which compare exactly.
  return role == other.role && name == other.name && recipient == other.recipient && channel == other.channel &&
         content_type == other.content_type && content.index() == other.content.index() &&
         text_content() == other.text_content();
}

}  // namespace moeserve::harmony
