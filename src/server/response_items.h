// The Responses API's output items as the assistant generates them (reasoning, message, function_call, in the order
// they appear), and the stream events OpenAI sends for them
// (https://platform.openai.com/docs/api-reference/responses-streaming): an item is opened with
// response.output_item.added (and response.content_part.added for the text of a reasoning item or a message), grows
// by .delta events, and is closed by the matching .done events and response.output_item.done. A reasoning item
// carries the raw analysis text as a reasoning_text content part, as OpenAI's gpt-oss reference server and vLLM
// stream it. The official clients rebuild the response from exactly these events, so every delta needs its item
// and part announced first.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "server/assistant_stream.h"

namespace moeserve::server {

class ResponseItems {
 public:
  // Sends one event (its type and fields; the caller adds type and sequence_number). Empty: not streaming.
  using Emit = std::function<void(const char* type, nlohmann::json fields)>;
  explicit ResponseItems(Emit emit);

  // What one generated token added; `calls` is the stream's tool calls (the delta's tool_index points there).
  void push(const AssistantDelta& delta, const std::vector<ToolCall>& calls);
  // The end of generation: closes the open item ("incomplete" when cut off), and where the answer has neither a
  // message nor a function call, adds an empty message, as OpenAI's answers always carry one.
  void finish(bool cut_off);

  // The items, as a response's "output" (after finish()).
  nlohmann::json output() const;

 private:
  enum class Kind { reasoning, message, function_call };
  struct Item {
    Kind kind;
    std::string id;
    std::string text;  // reasoning or message text, or a function call's arguments
    std::string call_id, name;
    std::string status = "in_progress";
  };

  void open(Kind kind, const ToolCall* call = nullptr);
  void append(const std::string& text);
  void close(const std::string& status);
  bool is_open(Kind kind) const {
    return !items_.empty() && items_.back().status == "in_progress" && items_.back().kind == kind;
  }
  nlohmann::json item_json(const Item& item) const;
  nlohmann::json part_json(const Item& item, const std::string& text) const;
  void send(const char* type, nlohmann::json fields) const;

  Emit emit_;
  std::vector<Item> items_;
  size_t call_index_ = SIZE_MAX;  // the tool call the open function_call item streams
};

}  // namespace moeserve::server
