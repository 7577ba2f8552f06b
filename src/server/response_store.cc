#include "server/response_store.h"

#include <fmt/format.h>

namespace moeserve::server {

using nlohmann::json;

void ResponseStore::put(const std::string& id, StoredResponse entry) {
  if (capacity_ == 0) return;
  std::lock_guard lock(mutex_);
  if (auto it = by_id_.find(id); it != by_id_.end()) {
    entries_.erase(it->second);
    by_id_.erase(it);
  }
  entries_.emplace_front(id, std::move(entry));
  by_id_[id] = entries_.begin();
  if (entries_.size() > capacity_) {
    by_id_.erase(entries_.back().first);
    entries_.pop_back();
  }
}

std::optional<StoredResponse> ResponseStore::get(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  entries_.splice(entries_.begin(), entries_, it->second);
  return it->second->second;
}

ResponsesTurn responses_turn(std::string_view body_text, ResponseStore& store, int max_json_depth) {
  json body = parse_request_body(body_text, max_json_depth);
  const Field fields(body);
  ResponsesTurn turn;
  turn.store = fields["store"].optional_bool().value_or(true);
  // This request's input as a list of items: a string is one user message.
  const Field input = fields["input"];
  json items = input.is_string()  ? json::array({{{"type", "message"}, {"role", "user"}, {"content", input.json()}}})
               : input.is_array() ? input.json()
                                  : json::array();
  if (const auto previous = fields["previous_response_id"].optional_string()) {
    const auto stored = store.get(*previous);
    if (!stored)
      fields["previous_response_id"].fail(
          store.capacity() == 0
              ? fmt::format("is '{}', but this server keeps no responses (serve --responses-store-size 0)", *previous)
              : fmt::format("is '{}': no stored response has that id (the server keeps the newest {}, in memory)",
                            *previous, store.capacity()));
    json joined = stored->conversation;
    for (auto& item : items) joined.push_back(std::move(item));
    items = std::move(joined);
  }
  // A malformed input is responses_request's to report: it stays as it was.
  if (input.is_string() || input.is_array() || fields["previous_response_id"].present()) body["input"] = items;
  turn.conversation = std::move(items);
  body.erase("store");
  body.erase("previous_response_id");
  turn.body = body.dump();
  return turn;
}

}  // namespace moeserve::server
