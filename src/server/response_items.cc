#include "server/response_items.h"

#include "server/answer_job.h"

namespace moeserve::server {

using nlohmann::json;

ResponseItems::ResponseItems(Emit emit) : emit_(std::move(emit)) {}

void ResponseItems::send(const char* type, json fields) const {
  if (emit_) emit_(type, std::move(fields));
}

json ResponseItems::part_json(const Item& item, const std::string& text) const {
  if (item.kind == Kind::reasoning) return {{"type", "reasoning_text"}, {"text", text}};
  return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}};
}

json ResponseItems::item_json(const Item& item) const {
  // While an item streams, its text arrives in deltas: the added event announces it empty.
  const bool streaming = item.status == "in_progress";
  switch (item.kind) {
    case Kind::reasoning:
      return {{"type", "reasoning"},
              {"id", item.id},
              {"summary", json::array()},
              {"content", streaming ? json::array() : json::array({part_json(item, item.text)})},
              {"status", item.status}};
    case Kind::message:
      return {{"type", "message"},
              {"id", item.id},
              {"status", item.status},
              {"role", "assistant"},
              {"content", streaming ? json::array() : json::array({part_json(item, item.text)})}};
    case Kind::function_call:
      return {{"type", "function_call"},
              {"id", item.id},
              {"call_id", item.call_id},
              {"name", item.name},
              {"arguments", streaming ? "" : item.text},
              {"status", item.status}};
  }
  return {};
}

void ResponseItems::open(Kind kind, const ToolCall* call) {
  if (!items_.empty() && items_.back().status == "in_progress") close("completed");
  Item item{kind, random_id(kind == Kind::reasoning ? "rs_" : kind == Kind::message ? "msg_" : "fc_"), "", "", ""};
  if (call) {
    item.call_id = call->id;
    item.name = call->name;
  }
  items_.push_back(std::move(item));
  const size_t index = items_.size() - 1;
  send("response.output_item.added", {{"output_index", index}, {"item", item_json(items_.back())}});
  if (kind != Kind::function_call)
    send("response.content_part.added", {{"item_id", items_.back().id},
                                         {"output_index", index},
                                         {"content_index", 0},
                                         {"part", part_json(items_.back(), "")}});
}

void ResponseItems::append(const std::string& text) {
  Item& item = items_.back();
  item.text += text;
  const size_t index = items_.size() - 1;
  switch (item.kind) {
    case Kind::reasoning:
      send("response.reasoning_text.delta",
           {{"item_id", item.id}, {"output_index", index}, {"content_index", 0}, {"delta", text}});
      break;
    case Kind::message:
      send("response.output_text.delta", {{"item_id", item.id},
                                          {"output_index", index},
                                          {"content_index", 0},
                                          {"delta", text},
                                          {"logprobs", json::array()}});
      break;
    case Kind::function_call:
      send("response.function_call_arguments.delta", {{"item_id", item.id}, {"output_index", index}, {"delta", text}});
      break;
  }
}

void ResponseItems::close(const std::string& status) {
  Item& item = items_.back();
  const size_t index = items_.size() - 1;
  switch (item.kind) {
    case Kind::reasoning:
      send("response.reasoning_text.done",
           {{"item_id", item.id}, {"output_index", index}, {"content_index", 0}, {"text", item.text}});
      break;
    case Kind::message:
      send("response.output_text.done", {{"item_id", item.id},
                                         {"output_index", index},
                                         {"content_index", 0},
                                         {"text", item.text},
                                         {"logprobs", json::array()}});
      break;
    case Kind::function_call:
      send("response.function_call_arguments.done",
           {{"item_id", item.id}, {"output_index", index}, {"name", item.name}, {"arguments", item.text}});
      break;
  }
  if (item.kind != Kind::function_call)
    send("response.content_part.done",
         {{"item_id", item.id}, {"output_index", index}, {"content_index", 0}, {"part", part_json(item, item.text)}});
  item.status = status;
  send("response.output_item.done", {{"output_index", index}, {"item", item_json(item)}});
}

void ResponseItems::push(const AssistantDelta& delta, const std::vector<ToolCall>& calls) {
  if (!delta.reasoning.empty()) {
    if (!is_open(Kind::reasoning)) open(Kind::reasoning);
    append(delta.reasoning);
  }
  if (!delta.content.empty()) {
    if (!is_open(Kind::message)) open(Kind::message);
    append(delta.content);
  }
  if (delta.tool_index) {
    if (delta.tool_started || !is_open(Kind::function_call) || call_index_ != *delta.tool_index) {
      call_index_ = *delta.tool_index;
      open(Kind::function_call, &calls[call_index_]);
    }
    if (!delta.tool_arguments.empty()) append(delta.tool_arguments);
  }
}

void ResponseItems::finish(bool cut_off) {
  if (!items_.empty() && items_.back().status == "in_progress") close(cut_off ? "incomplete" : "completed");
  for (const Item& item : items_)
    if (item.kind != Kind::reasoning) return;
  open(Kind::message);
  close(cut_off ? "incomplete" : "completed");
}

json ResponseItems::output() const {
  json output = json::array();
  for (const Item& item : items_) output.push_back(item_json(item));
  return output;
}

}  // namespace moeserve::server
