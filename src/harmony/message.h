// Harmony's conversation model (openai/harmony src/chat.rs @ec7606d): messages with an author (role and, for
// tools, a name), an optional recipient, channel and content type, and content that is text, the system
// message's structured content, or the developer message's.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace moeserve::harmony {

enum class Role { user, assistant, system, developer, tool };
std::string_view role_name(Role role);
std::optional<Role> role_from_name(std::string_view name);

enum class ReasoningEffort { low, medium, high };
std::string_view reasoning_effort_name(ReasoningEffort effort);
// "low", "medium" or "high"; anything else is an Error.
ReasoningEffort parse_reasoning_effort(std::string_view name);

struct ToolDescription {
  std::string name;
  std::string description;
  // A JSON schema; ordered_json keeps the property order the schema was written in, which the rendering shows.
  std::optional<nlohmann::ordered_json> parameters;
};

struct ToolNamespace {
  std::string name;
  std::optional<std::string> description;
  std::vector<ToolDescription> tools;

  // The built-in tools harmony describes (chat.rs ToolNamespaceConfig::browser / ::python).
  static ToolNamespace browser();
  static ToolNamespace python();
};

struct ChannelConfig {
  std::vector<std::string> valid_channels;
  bool channel_required = true;
};

// Defaults are harmony's SystemContent::new().
struct SystemContent {
  std::optional<std::string> model_identity = "You are ChatGPT, a large language model trained by OpenAI.";
  std::optional<ReasoningEffort> reasoning_effort = ReasoningEffort::medium;
  std::map<std::string, ToolNamespace> tools;  // by namespace name, rendered in name order
  std::optional<std::string> conversation_start_date;  // "Current date: YYYY-MM-DD"
  std::optional<std::string> knowledge_cutoff = "2024-06";
  std::optional<ChannelConfig> channel_config = ChannelConfig{{"analysis", "commentary", "final"}, true};

  SystemContent& with_tools(ToolNamespace tools);
};

struct DeveloperContent {
  std::optional<std::string> instructions;
  std::map<std::string, ToolNamespace> tools;

  DeveloperContent& with_function_tools(std::vector<ToolDescription> functions);
  bool has_function_tools() const;
};

using Content = std::variant<std::string, SystemContent, DeveloperContent>;

struct Message {
  Role role = Role::user;
  std::optional<std::string> name;       // the author's name; a tool message's author is the tool ("functions.x")
  std::optional<std::string> recipient;  // "functions.get_weather", "assistant", ...; "all" is not rendered
  std::optional<std::string> channel;    // "analysis", "commentary", "final"
  std::optional<std::string> content_type;  // "json", "<|constrain|>json", "code"
  Content content;

  static Message text(Role role, std::string text) { return Message{role, {}, {}, {}, {}, std::move(text)}; }
  static Message from_tool(std::string tool_name, std::string text) {
    return Message{Role::tool, std::move(tool_name), {}, {}, {}, std::move(text)};
  }
  Message& with_channel(std::string c) { return channel = std::move(c), *this; }
  Message& with_recipient(std::string r) { return recipient = std::move(r), *this; }
  Message& with_content_type(std::string t) { return content_type = std::move(t), *this; }
  // The text of a text message ("" for system and developer content).
  const std::string& text_content() const;

  bool operator==(const Message& other) const;
};

using Conversation = std::vector<Message>;

}  // namespace moeserve::harmony
