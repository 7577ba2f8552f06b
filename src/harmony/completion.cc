#include "harmony/completion.h"

#include <algorithm>

#include "harmony/parser.h"
#include "harmony/render.h"
#include "util/error.h"

namespace moeserve::harmony {

std::vector<TokenId> assistant_stop_tokens() { return {o200k::kReturn, o200k::kCall}; }

Message system_message(ReasoningEffort effort) {
  SystemContent system;
  system.reasoning_effort = effort;
  return Message{Role::system, {}, {}, {}, {}, std::move(system)};
}

Conversation prompt_conversation(std::string prompt, ReasoningEffort effort) {
  return {system_message(effort), Message::text(Role::user, std::move(prompt))};
}

std::vector<TokenId> render_prompt(const Tokenizer& tokenizer, std::string prompt, ReasoningEffort effort) {
  return render_conversation_for_completion(tokenizer, prompt_conversation(std::move(prompt), effort));
}

AssistantReply parse_assistant_reply(const Tokenizer& tokenizer, std::span<const TokenId> generated) {
  AssistantReply reply;
  StreamingParser parser(tokenizer, Role::assistant);
  try {
    for (TokenId token : generated) parser.process(token);
    parser.process_eos();
  } catch (const Error& e) {
    reply.error = e.what();
  }
  reply.messages = parser.messages();
  if (parser.current()) reply.messages.push_back(*parser.current());  // content the error or the end cut short
  const auto stops = assistant_stop_tokens();
  reply.stopped = !generated.empty() && std::find(stops.begin(), stops.end(), generated.back()) != stops.end();
  for (const Message& m : reply.messages) {
    std::string& into = m.channel == "analysis" ? reply.analysis : reply.final;
    if (m.channel != "analysis" && m.channel != "final") continue;
    if (!into.empty()) into += "\n";
    into += m.text_content();
  }
  return reply;
}

}  // namespace moeserve::harmony
