#include "harmony/render.h"

#include <algorithm>

#include "harmony/tool_schema.h"
#include "util/error.h"

namespace moeserve::harmony {
namespace {

constexpr std::string_view kConstrain = "<|constrain|>";

bool has_function_tools(const Conversation& conversation) {
  return std::any_of(conversation.begin(), conversation.end(), [](const Message& m) {
    const auto* developer = std::get_if<DeveloperContent>(&m.content);
    return developer != nullptr && developer->has_function_tools();
  });
}

}  // namespace

std::string system_content_text(const SystemContent& system, bool conversation_has_function_tools) {
  std::vector<std::string> sections;
  std::vector<std::string> top;
  if (system.model_identity) top.push_back(*system.model_identity);
  if (system.knowledge_cutoff) top.push_back("Knowledge cutoff: " + *system.knowledge_cutoff);
  if (system.conversation_start_date) top.push_back("Current date: " + *system.conversation_start_date);
  if (!top.empty()) sections.push_back(join(top, "\n"));
  if (system.reasoning_effort) {
    sections.push_back("Reasoning: " + std::string(reasoning_effort_name(*system.reasoning_effort)));
  }
  if (!system.tools.empty()) sections.push_back(tools_section(system.tools));
  if (system.channel_config && !system.channel_config->valid_channels.empty()) {
    std::string channels = "# Valid channels: " + join(system.channel_config->valid_channels, ", ") + ".";
    if (system.channel_config->channel_required) channels += " Channel must be included for every message.";
    if (conversation_has_function_tools) {
      channels += "\nCalls to these tools must go to the commentary channel: 'functions'.";
    }
    sections.push_back(channels);
  }
  return join(sections, "\n\n");
}

std::string developer_content_text(const DeveloperContent& developer) {
  std::vector<std::string> sections;
  if (developer.instructions) {
    sections.push_back("# Instructions");
    sections.push_back(*developer.instructions);
  }
  if (!developer.tools.empty()) sections.push_back(tools_section(developer.tools));
  return join(sections, "\n\n");
}

std::vector<TokenId> render_message(const Tokenizer& tokenizer, const Message& message,
                                    bool conversation_has_function_tools) {
  std::vector<TokenId> out;
  auto text = [&](std::string_view t) { tokenizer.encode_ordinary_into(t, out); };
  out.push_back(o200k::kStart);
  if (message.role == Role::tool) {
    MOESERVE_CHECK(message.name.has_value(), "harmony: a tool message needs the tool's name as its author");
    text(*message.name);
  } else {
    text(role_name(message.role));
    if (message.name) text(":" + *message.name);
  }
  if (message.recipient && *message.recipient != "all") text(" to=" + *message.recipient);
  if (message.channel) {
    out.push_back(o200k::kChannel);
    text(*message.channel);
  }
  if (message.content_type) {
    if (message.content_type->starts_with(kConstrain)) {
      text(" ");
      out.push_back(o200k::kConstrain);
      if (message.content_type->size() > kConstrain.size()) text(message.content_type->substr(kConstrain.size()));
    } else {
      text(" " + *message.content_type);
    }
  }
  out.push_back(o200k::kMessage);
  if (const auto* system = std::get_if<SystemContent>(&message.content)) {
    MOESERVE_CHECK(message.role == Role::system, "harmony: system content in a {} message", role_name(message.role));
    text(system_content_text(*system, conversation_has_function_tools));
  } else if (const auto* developer = std::get_if<DeveloperContent>(&message.content)) {
    MOESERVE_CHECK(message.role == Role::developer, "harmony: developer content in a {} message",
                   role_name(message.role));
    text(developer_content_text(*developer));
  } else {
    text(message.text_content());
  }
  out.push_back(message.role == Role::assistant && message.recipient ? o200k::kCall : o200k::kEnd);
  return out;
}

std::vector<TokenId> render_conversation(const Tokenizer& tokenizer, const Conversation& conversation,
                                         const RenderOptions& options) {
  const bool function_tools = has_function_tools(conversation);
  const auto last_assistant = std::find_if(conversation.rbegin(), conversation.rend(),
                                           [](const Message& m) { return m.role == Role::assistant; });
  const bool last_assistant_is_final = last_assistant != conversation.rend() && last_assistant->channel == "final";
  const auto first_final = std::find_if(conversation.begin(), conversation.end(),
                                        [](const Message& m) { return m.channel == "final"; });
  const bool drop_analysis = options.auto_drop_analysis && last_assistant_is_final;
  std::vector<TokenId> out;
  for (auto it = conversation.begin(); it != conversation.end(); ++it) {
    if (drop_analysis && it < first_final && it->channel == "analysis") continue;
    const std::vector<TokenId> message = render_message(tokenizer, *it, function_tools);
    out.insert(out.end(), message.begin(), message.end());
  }
  return out;
}

std::vector<TokenId> render_conversation_for_completion(const Tokenizer& tokenizer, const Conversation& conversation,
                                                        Role next_role, const RenderOptions& options) {
  std::vector<TokenId> out = render_conversation(tokenizer, conversation, options);
  out.push_back(o200k::kStart);
  tokenizer.encode_ordinary_into(role_name(next_role), out);
  return out;
}

std::vector<TokenId> render_conversation_for_training(const Tokenizer& tokenizer, const Conversation& conversation,
                                                      const RenderOptions& options) {
  std::vector<TokenId> out = render_conversation(tokenizer, conversation, options);
  if (!conversation.empty() && conversation.back().role == Role::assistant && conversation.back().channel == "final") {
    out.back() = o200k::kReturn;
  }
  return out;
}

}  // namespace moeserve::harmony
