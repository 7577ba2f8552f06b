// The Responses API's stored responses (OpenAI's `store`, true unless a request says false), so that a later
// request can continue one with `previous_response_id` and GET /v1/responses/{id} can return it. Held in memory:
// the newest `capacity` responses are kept (serve --responses-store-size), the least recently used dropped first,
// and all are lost when the server stops.
#pragma once

#include <nlohmann/json.hpp>

#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "server/request_fields.h"

namespace moeserve::server {

struct StoredResponse {
  nlohmann::json response;      // the response object as it was answered
  nlohmann::json conversation;  // input items: every earlier turn, this request's input, then its output items
};

class ResponseStore {
 public:
  explicit ResponseStore(size_t capacity) : capacity_(capacity) {}

  size_t capacity() const { return capacity_; }
  void put(const std::string& id, StoredResponse entry);
  std::optional<StoredResponse> get(const std::string& id);

 private:
  size_t capacity_;
  std::mutex mutex_;
  std::list<std::pair<std::string, StoredResponse>> entries_;  // most recently used first
  std::unordered_map<std::string, std::list<std::pair<std::string, StoredResponse>>::iterator> by_id_;
};

// A /v1/responses body made ready for responses_request(): with previous_response_id, the stored conversation
// goes before this request's input (as OpenAI does, the earlier instructions do not carry over); store and
// previous_response_id are taken out. A 400 for an unknown id (or any id when the store holds none), naming it.
struct ResponsesTurn {
  std::string body;             // for responses_request()
  nlohmann::json conversation;  // the input items of this turn, earlier turns included
  bool store = true;
};
ResponsesTurn responses_turn(std::string_view body, ResponseStore& store, int max_json_depth);

}  // namespace moeserve::server
