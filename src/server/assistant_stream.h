// The assistant's generated tokens, read as Harmony while they arrive, turned into what OpenAI clients see:
// reasoning text (analysis channel), content (final channel, and commentary without a recipient), and tool calls
// (commentary to functions.NAME: the name, then the arguments as they stream). Output that is not well-formed
// Harmony (an untrained or confused model) is not lost: from the first token the parser rejects, the text of the
// unparsed tokens becomes content. Stop strings apply to the content; the first one found ends it there.
// For DeepSeek-R1 models the reply is read as R1's instead (chat/r1_chat.h): reasoning up to </think>, then content.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/r1_chat.h"
#include "harmony/parser.h"
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

  bool stop_string_hit() const { return stop_hit_; }
  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }
  const std::vector<ToolCall>& tool_calls() const { return tool_calls_; }
  int reasoning_tokens() const { return reasoning_tokens_; }

 private:
  void add_content(std::string text, AssistantDelta& delta);
  void add_r1(const chat::R1ReplyStream::Delta& d, AssistantDelta& delta);
  void route(const harmony::Message& message, const std::string& text, AssistantDelta& delta);

  const Tokenizer& tokenizer_;
  std::vector<std::string> stops_;
  harmony::StreamingParser parser_;
  std::optional<chat::R1ReplyStream> r1_;  // set for a DeepSeek-R1 reply
  std::optional<IncrementalDecoder> raw_;  // set once the output stopped being Harmony
  std::vector<TokenId> unparsed_;          // tokens of the message being read (for the fallback)
  size_t messages_seen_ = 0;
  bool in_tool_call_ = false;
  std::string held_;  // content not yet released: it may be the start of a stop string
  bool stop_hit_ = false;
  std::string reasoning_, content_;
  std::vector<ToolCall> tool_calls_;
  int reasoning_tokens_ = 0;
};

}  // namespace moeserve::server
