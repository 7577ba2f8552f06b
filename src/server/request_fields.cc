#include "server/request_fields.h"

#include <fmt/format.h>

namespace moeserve::server {

using nlohmann::json;

std::optional<std::string> optional_string(const json& body, const char* field) {
  if (!body.contains(field) || body[field].is_null()) return std::nullopt;
  if (!body[field].is_string()) throw bad_request(fmt::format("'{}' must be a string", field), field);
  return body[field].get<std::string>();
}

std::optional<bool> optional_bool(const json& body, const char* field) {
  if (!body.contains(field) || body[field].is_null()) return std::nullopt;
  if (!body[field].is_boolean()) throw bad_request(fmt::format("'{}' must be a boolean", field), field);
  return body[field].get<bool>();
}

std::optional<int64_t> optional_int(const json& body, const char* field, int64_t min, int64_t max) {
  if (!body.contains(field) || body[field].is_null()) return std::nullopt;
  const json& v = body[field];
  if (!v.is_number_integer()) throw bad_request(fmt::format("'{}' must be an integer", field), field);
  const int64_t value = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                            ? INT64_MAX
                            : v.get<int64_t>();
  if (value < min || value > max)
    throw bad_request(fmt::format("'{}' is {}; it must be between {} and {}", field, value, min, max), field);
  return value;
}

std::optional<double> optional_number(const json& body, const char* field, double min, double max) {
  if (!body.contains(field) || body[field].is_null()) return std::nullopt;
  if (!body[field].is_number()) throw bad_request(fmt::format("'{}' must be a number", field), field);
  const double value = body[field].get<double>();
  if (!(value >= min && value <= max))
    throw bad_request(fmt::format("'{}' is {}; it must be between {} and {}", field, value, min, max), field);
  return value;
}

std::vector<std::string> stop_strings(const json& body) {
  if (!body.contains("stop") || body["stop"].is_null()) return {};
  const json& stop = body["stop"];
  if (stop.is_string()) return stop.get<std::string>().empty() ? std::vector<std::string>{} : std::vector{stop.get<std::string>()};
  if (!stop.is_array() || stop.size() > 4) throw bad_request("'stop' must be a string or a list of up to 4 strings", "stop");
  std::vector<std::string> out;
  for (const auto& s : stop) {
    if (!s.is_string()) throw bad_request("'stop' must be a string or a list of up to 4 strings", "stop");
    if (!s.get<std::string>().empty()) out.push_back(s.get<std::string>());
  }
  return out;
}

SamplingParams sampling_params(const json& body) {
  SamplingParams p;
  p.temperature = static_cast<float>(optional_number(body, "temperature", 0.0, 2.0).value_or(1.0));
  p.top_p = static_cast<float>(optional_number(body, "top_p", 0.0, 1.0).value_or(1.0));
  if (p.top_p <= 0.0f) throw bad_request("'top_p' must be greater than 0", "top_p");
  // top_k and min_p are vLLM/SGLang extensions; top_k -1 means disabled there.
  const int64_t top_k = optional_int(body, "top_k", -1, 1 << 30).value_or(0);
  p.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);
  p.min_p = static_cast<float>(optional_number(body, "min_p", 0.0, 1.0).value_or(0.0));
  p.seed = static_cast<uint64_t>(optional_int(body, "seed", INT64_MIN, INT64_MAX).value_or(0));
  return p;
}

std::string content_text(const json& content, const std::string& field) {
  if (content.is_null()) return {};
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw bad_request(fmt::format("'{}' must be a string or a list of text parts", field), field);
  std::string text;
  for (const auto& part : content) {
    if (!part.is_object() || !part.contains("text") || !part["text"].is_string())
      throw bad_request(fmt::format("'{}': every part must be an object with a 'text' string (only text is supported)",
                                    field),
                        field);
    text += part["text"].get<std::string>();
  }
  return text;
}

void for_each_chat_message(const json& body,
                           const std::function<void(const std::string& role, const std::string& text,
                                                    const json& message, const std::string& where)>& on_message) {
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
    throw bad_request("'messages' must be a non-empty list", "messages");
  for (size_t i = 0; i < body["messages"].size(); ++i) {
    const json& m = body["messages"][i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw bad_request(where + " must be an object with a 'role'", "messages");
    on_message(m["role"].get<std::string>(), content_text(m.value("content", json()), where + ".content"), m, where);
  }
}

}  // namespace moeserve::server
