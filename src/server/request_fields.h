// Typed reading of request JSON fields: wrong types and out-of-range values become 400 errors naming the field.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampling_params.h"
#include "server/api_error.h"

namespace moeserve::server {

std::optional<std::string> optional_string(const nlohmann::json& body, const char* field);
std::optional<bool> optional_bool(const nlohmann::json& body, const char* field);
std::optional<int64_t> optional_int(const nlohmann::json& body, const char* field, int64_t min, int64_t max);
std::optional<double> optional_number(const nlohmann::json& body, const char* field, double min, double max);

// "stop": a string or a list of up to 4 strings.
std::vector<std::string> stop_strings(const nlohmann::json& body);
// temperature, top_p, top_k, min_p, seed.
SamplingParams sampling_params(const nlohmann::json& body);
// Text content: a string, or a list of {"type": "text" | "input_text" | "output_text", "text": ...} parts.
std::string content_text(const nlohmann::json& content, const std::string& field);

// A chat completion's "messages" (a non-empty list), each checked to be an object with a string 'role':
// on_message(role, its content text, the message, "messages[i]") in order.
void for_each_chat_message(const nlohmann::json& body,
                           const std::function<void(const std::string& role, const std::string& text,
                                                    const nlohmann::json& message, const std::string& where)>& on_message);

}  // namespace moeserve::server
