// Typed reading of request JSON. Every value is read through a Field, which knows where it sits in the body
// ("tools[0].function.name"): a wrong type or an out-of-range value is a 400 naming that path, never a
// nlohmann exception. Bodies are parsed with a depth limit before anything walks them (nlohmann's parser keeps
// its own stack, but copying, dumping and destroying a value, and our schema rendering, recurse).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sampling/logits_processing.h"
#include "sampling/sampling_params.h"
#include "server/api_error.h"

namespace moeserve::server {

// Bounds a request must keep, checked before anything is rendered or tokenised (400 above them).
struct RequestLimits {
  int json_depth = 64;                  // nesting of the body (tool schemas sit inside it, so this bounds them too)
  size_t messages = 4096;               // chat messages, Responses input items, completions prompts
  size_t text_bytes = size_t{8} << 20;  // all the text to tokenise: instructions, messages, tool descriptions, prompts
  size_t tools = 128;
  size_t tool_schema_bytes = size_t{256} << 10;  // all tools' parameter schemas together, as compact JSON
  size_t stop_bytes = 256;                       // each stop string (held back and compared on every token)
};

// The body as JSON: a 400 when it is not JSON, not an object, or nested deeper than max_depth.
nlohmann::json parse_request_body(std::string_view body, int max_depth);

class Field {
 public:
  // The body itself; its members' paths are their names.
  explicit Field(const nlohmann::json& body) : value_(&body) {}

  const std::string& path() const { return path_; }
  // Present and not null.
  bool present() const { return value_ != nullptr && !value_->is_null(); }
  bool is_string() const { return present() && value_->is_string(); }
  bool is_object() const { return present() && value_->is_object(); }
  bool is_array() const { return present() && value_->is_array(); }
  // The value itself (present() must hold).
  const nlohmann::json& json() const { return *value_; }

  // A member: absent when this is absent or null or has no such key; a 400 when this is something else than an
  // object.
  Field operator[](std::string_view key) const;
  // The elements of a list (none when absent or null); a 400 when this is not a list or has more than max_items.
  std::vector<Field> items(size_t max_items = SIZE_MAX) const;
  // Element i of a list (is_array() must hold and i be in range).
  Field item(size_t i) const { return Field(&(*value_)[i], path_ + "[" + std::to_string(i) + "]"); }

  // Checked values; nullopt when absent or null.
  std::optional<std::string> optional_string() const;
  std::optional<bool> optional_bool() const;
  std::optional<int64_t> optional_int(int64_t min, int64_t max) const;
  std::optional<double> optional_number(double min, double max) const;
  // A required string: a 400 when absent.
  std::string string() const;

  // A 400 "'<path>' <what>" with this path as the parameter.
  [[noreturn]] void fail(std::string_view what) const;

 private:
  Field(const nlohmann::json* value, std::string path) : value_(value), path_(std::move(path)) {}
  const nlohmann::json* value_;
  std::string path_;
};

// The text a request asks to tokenise, added up as it is read: a 400 naming the field that passes the limit.
class TextBudget {
 public:
  explicit TextBudget(size_t limit) : limit_(limit), left_(limit) {}
  std::string take(const Field& where, std::string text);

 private:
  size_t limit_;
  size_t left_;
};

// "stop": a string or a list of up to 4 strings, each at most limits.stop_bytes.
std::vector<std::string> stop_strings(const Field& body, const RequestLimits& limits);
// temperature, top_p, top_k, min_p, and seed (unseeded: the caller's draw, unseeded_seed).
SamplingParams sampling_params(const Field& body, uint64_t unseeded_seed);
// vLLM's and OpenAI's logits parameters: presence_penalty and frequency_penalty in [-2, 2], repetition_penalty
// in (0, 2], logit_bias {"token id": bias in [-100, 100]} (ids inside the vocabulary), min_tokens (0 up to
// max_tokens).
LogitsProcessing logits_processing(const Field& body, int32_t vocab_size, int max_tokens);
// vLLM's stop_token_ids: up to 256 token ids inside the vocabulary.
std::vector<int32_t> stop_token_ids(const Field& body, int32_t vocab_size);
// Text content: a string, or a list of {"type": "text" | "input_text" | "output_text" | "reasoning_text",
// "text": ...} parts.
std::string content_text(const Field& content);

}  // namespace moeserve::server
