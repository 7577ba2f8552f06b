#include "server/request_fields.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace moeserve::server {

using nlohmann::json;

json parse_request_body(std::string_view body, int max_depth) {
  // The parser calls back with the depth of every value it starts (the body itself is depth 0) before it looks
  // inside, and keeps nothing the callback refuses: a body nested a million deep is refused at level max_depth
  // without any value of that depth being built.
  bool too_deep = false;
  const json::parser_callback_t limit_depth = [&](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= max_depth)
      too_deep = true;
    return !too_deep;
  };
  json parsed = json::parse(body, limit_depth, /*allow_exceptions=*/false);
  if (too_deep) throw bad_request(fmt::format("request JSON nested deeper than {} levels", max_depth));
  if (parsed.is_discarded()) throw bad_request("the request body is not valid JSON");
  if (!parsed.is_object()) throw bad_request("the request body must be a JSON object");
  return parsed;
}

void Field::fail(std::string_view what) const { throw bad_request(fmt::format("'{}' {}", path_, what), path_); }

Field Field::operator[](std::string_view key) const {
  std::string path = path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
  if (!present()) return Field(nullptr, std::move(path));
  if (!value_->is_object()) fail("must be an object");
  const auto it = value_->find(key);
  return Field(it == value_->end() ? nullptr : &*it, std::move(path));
}

std::vector<Field> Field::items(size_t max_items) const {
  if (!present()) return {};
  if (!value_->is_array()) fail("must be a list");
  if (value_->size() > max_items) fail(fmt::format("has {} items; at most {} are allowed", value_->size(), max_items));
  std::vector<Field> out;
  out.reserve(value_->size());
  for (size_t i = 0; i < value_->size(); ++i) out.push_back(item(i));
  return out;
}

std::optional<std::string> Field::optional_string() const {
  if (!present()) return std::nullopt;
  if (!value_->is_string()) fail("must be a string");
  return value_->get<std::string>();
}

std::string Field::string() const {
  if (!present()) fail("is required");
  return *optional_string();
}

std::optional<bool> Field::optional_bool() const {
  if (!present()) return std::nullopt;
  if (!value_->is_boolean()) fail("must be a boolean");
  return value_->get<bool>();
}

std::optional<int64_t> Field::optional_int(int64_t min, int64_t max) const {
  if (!present()) return std::nullopt;
  if (!value_->is_number_integer()) fail("must be an integer");
  const bool above_int64 = value_->is_number_unsigned() && value_->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX);
  const int64_t value = above_int64 ? INT64_MAX : value_->get<int64_t>();
  if (above_int64 || value < min || value > max)
    fail(fmt::format("is {}; it must be between {} and {}", value_->dump(), min, max));
  return value;
}

std::optional<double> Field::optional_number(double min, double max) const {
  if (!present()) return std::nullopt;
  if (!value_->is_number()) fail("must be a number");
  const double value = value_->get<double>();
  if (!(value >= min && value <= max)) fail(fmt::format("is {}; it must be between {} and {}", value, min, max));
  return value;
}

std::string TextBudget::take(const Field& where, std::string text) {
  if (text.size() > left_)
    where.fail(fmt::format("takes the request's text past {} bytes, the most this server tokenises", limit_));
  left_ -= text.size();
  return text;
}

std::vector<std::string> stop_strings(const Field& body, const RequestLimits& limits) {
  const Field stop = body["stop"];
  std::vector<Field> given;
  if (stop.is_string()) {
    given.push_back(stop);
  } else {
    if (stop.present() && !stop.is_array()) stop.fail("must be a string or a list of up to 4 strings");
    given = stop.items(4);
  }
  std::vector<std::string> out;
  for (const Field& s : given) {
    std::string text = s.string();
    if (text.size() > limits.stop_bytes) s.fail(fmt::format("has {} bytes; at most {} are allowed", text.size(), limits.stop_bytes));
    if (!text.empty()) out.push_back(std::move(text));
  }
  return out;
}

SamplingParams sampling_params(const Field& body, uint64_t unseeded_seed) {
  SamplingParams p;
  p.temperature = static_cast<float>(body["temperature"].optional_number(0.0, 2.0).value_or(1.0));
  p.top_p = static_cast<float>(body["top_p"].optional_number(0.0, 1.0).value_or(1.0));
  if (p.top_p <= 0.0f) body["top_p"].fail("must be greater than 0");
  // top_k and min_p are vLLM/SGLang extensions; top_k -1 means disabled there.
  const int64_t top_k = body["top_k"].optional_int(-1, 1 << 30).value_or(0);
  p.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);
  p.min_p = static_cast<float>(body["min_p"].optional_number(0.0, 1.0).value_or(0.0));
  const std::optional<int64_t> seed = body["seed"].optional_int(INT64_MIN, INT64_MAX);
  p.seed = seed ? static_cast<uint64_t>(*seed) : unseeded_seed;
  return p;
}

namespace {

int32_t token_id(const Field& field, const std::string& text, int32_t vocab_size) {
  int64_t id = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (error != std::errc() || end != text.data() + text.size() || id < 0 || id >= vocab_size)
    field.fail(fmt::format("has the key '{}'; keys must be token ids from 0 to {}", text, vocab_size - 1));
  return static_cast<int32_t>(id);
}

}  // namespace

LogitsProcessing logits_processing(const Field& body, int32_t vocab_size, int max_tokens) {
  LogitsProcessing p;
  p.presence_penalty = static_cast<float>(body["presence_penalty"].optional_number(-2.0, 2.0).value_or(0.0));
  p.frequency_penalty = static_cast<float>(body["frequency_penalty"].optional_number(-2.0, 2.0).value_or(0.0));
  const Field repetition = body["repetition_penalty"];
  p.repetition_penalty = static_cast<float>(repetition.optional_number(0.0, 2.0).value_or(1.0));
  if (p.repetition_penalty <= 0.0f) repetition.fail("must be greater than 0");
  const Field bias = body["logit_bias"];
  if (bias.present()) {
    if (!bias.is_object()) bias.fail("must be an object of token ids to biases");
    if (bias.json().size() > 1024) bias.fail(fmt::format("has {} entries; at most 1024 are allowed", bias.json().size()));
    for (const auto& [key, value] : bias.json().items()) {
      const int32_t token = token_id(bias, key, vocab_size);
      p.logit_bias.emplace_back(token, static_cast<float>(bias[key].optional_number(-100.0, 100.0).value_or(0.0)));
    }
    std::sort(p.logit_bias.begin(), p.logit_bias.end());
  }
  const Field min_tokens = body["min_tokens"];
  p.min_tokens = static_cast<int>(min_tokens.optional_int(0, INT32_MAX).value_or(0));
  if (p.min_tokens > max_tokens) min_tokens.fail(fmt::format("is {}, above max_tokens ({})", p.min_tokens, max_tokens));
  return p;
}

std::vector<int32_t> stop_token_ids(const Field& body, int32_t vocab_size) {
  std::vector<int32_t> ids;
  for (const Field& id : body["stop_token_ids"].items(256)) {
    const std::optional<int64_t> value = id.optional_int(0, vocab_size - 1);
    if (!value) id.fail("must be a token id");
    ids.push_back(static_cast<int32_t>(*value));
  }
  return ids;
}

std::string content_text(const Field& content) {
  if (!content.present()) return {};
  if (content.is_string()) return content.json().get<std::string>();
  if (!content.is_array()) content.fail("must be a string or a list of text parts");
  std::string text;
  for (const Field& part : content.items()) {
    const std::optional<std::string> type = part["type"].optional_string();
    if (type && *type != "text" && *type != "input_text" && *type != "output_text" && *type != "reasoning_text")
      part["type"].fail(fmt::format("is '{}'; only text parts are supported", *type));
    text += part["text"].string();
  }
  return text;
}

}  // namespace moeserve::server
