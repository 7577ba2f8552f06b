// The assistant's generated tokens, read as Harmony while they arrive, turned into what OpenAI clients see:
// reasoning text (analysis channel), content (final channel, and commentary without a recipient), and tool calls
// (commentary to functions.NAME: the name, then the arguments as they stream). Output that is not well-formed
// Harmony (an untrained or confused model) is not lost: from the first token the parser rejects, the text of the
// unparsed tokens becomes content. Stop strings apply to the content; the first one found ends it there. They
// also apply to a header being read: output that never leaves a header (plain text from a model that does not
// write Harmony) would otherwise show no content, and hit no stop string, until generation ends; a stop string
// in a header's text makes that message plain content, cut there (vLLM matches stop strings on all the output
// text, headers included). For DeepSeek-R1 models the reply is read as R1's instead (chat/r1_chat.h):
// reasoning up to </think>, then content.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/r1_chat.h"
#include "harmony/parser.h"
#include "server/stop_string_filter.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"

namespace moeserve::server {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

struct AssistantDelta {
  std::string reasoning;
  std::string content;
  // A tool call that started with this token (name and id) or whose arguments grew.
  std::optional<size_t> tool_index;
  bool tool_started = false;
  std::string tool_arguments;

  bool empty() const { return reasoning.empty() && content.empty() && !tool_index; }
};

class AssistantStream {
 public:
  AssistantStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings);
  // A DeepSeek-R1 reply.
  struct R1Reply {};
  AssistantStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings, R1Reply);

  AssistantDelta push(TokenId token);
  // The end of generation: flushes what is pending.
  AssistantDelta finish();

  bool stop_string_hit() const { return stops_.hit(); }
  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }
  const std::vector<ToolCall>& tool_calls() const { return tool_calls_; }
  int reasoning_tokens() const { return reasoning_tokens_; }

 private:
  void add_content(std::string_view text, AssistantDelta& delta);
  void add_r1(const chat::R1ReplyStream::Delta& d, AssistantDelta& delta);
  void route(const harmony::Message& message, const std::string& text, AssistantDelta& delta);
  // From here on the output is plain text: the unfinished message's tokens, then every token, become content.
  void become_raw(AssistantDelta& delta);
  // Adds the token to the unfinished message's header text; whether that completed a stop string there.
  bool stop_string_in_header(TokenId token);

  const Tokenizer& tokenizer_;
  StopStringFilter stops_;
  harmony::StreamingParser parser_;
  std::optional<chat::R1ReplyStream> r1_;  // set for a DeepSeek-R1 reply
  std::optional<IncrementalDecoder> raw_;  // set once the output stopped being Harmony
  std::vector<TokenId> unparsed_;          // tokens of the message being read (for the fallback)
  std::optional<IncrementalDecoder> unparsed_decoder_;  // the text of those before the content (the header)
  std::string unparsed_text_;
  size_t messages_seen_ = 0;
  bool in_tool_call_ = false;
  std::string reasoning_, content_;
  std::vector<ToolCall> tool_calls_;
  int reasoning_tokens_ = 0;
};

}  // namespace moeserve::server
