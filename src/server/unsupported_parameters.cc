#include "server/unsupported_parameters.h"

#include <fmt/format.h>

namespace moeserve::server {

using nlohmann::json;

namespace {

bool is_text_format(const json& v) { return v.is_object() && v.size() == 1 && v.value("type", json()) == "text"; }

struct Unsupported {
  const char* name;
  const char* neutral;  // what is accepted besides null, for the message
  bool (*is_neutral)(const json&);
  bool on_completions;  // false: /v1/completions implements it (ignore_eos) or checks it itself (min_tokens)
};

// OpenAI's chat, completions and Responses references and vLLM's sampling extensions
// (https://platform.openai.com/docs/api-reference, https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html).
constexpr Unsupported kUnsupported[] = {
    {"response_format", "{\"type\": \"text\"}", is_text_format, true},
    {"logit_bias", "{}", [](const json& v) { return v.is_object() && v.empty(); }, true},
    {"presence_penalty", "0", [](const json& v) { return v.is_number() && v.get<double>() == 0.0; }, true},
    {"frequency_penalty", "0", [](const json& v) { return v.is_number() && v.get<double>() == 0.0; }, true},
    {"repetition_penalty", "1", [](const json& v) { return v.is_number() && v.get<double>() == 1.0; }, true},
    {"best_of", "1", [](const json& v) { return v.is_number_integer() && v.get<int64_t>() == 1; }, true},
    {"suffix", "\"\"", [](const json& v) { return v.is_string() && v.get_ref<const std::string&>().empty(); }, true},
    {"store", "false", [](const json& v) { return v.is_boolean() && !v.get<bool>(); }, true},
    {"previous_response_id", "null", [](const json&) { return false; }, true},
    {"functions", "[]", [](const json& v) { return v.is_array() && v.empty(); }, true},
    {"ignore_eos", "false", [](const json& v) { return v.is_boolean() && !v.get<bool>(); }, false},
    {"min_tokens", "0", [](const json& v) { return v.is_number_integer() && v.get<int64_t>() == 0; }, false},
    {"stop_token_ids", "[]", [](const json& v) { return v.is_array() && v.empty(); }, true},
    {"top_logprobs", "0", [](const json& v) { return v.is_number_integer() && v.get<int64_t>() == 0; }, true},
};

[[noreturn]] void unsupported(const Field& field, const char* neutral) {
  field.fail(fmt::format("is not supported (only null or {} is accepted)", neutral));
}

}  // namespace

void reject_unsupported_parameters(const Field& body, Endpoint endpoint) {
  for (const Unsupported& u : kUnsupported) {
    if (endpoint == Endpoint::completions && !u.on_completions) continue;
    const Field field = body[u.name];
    if (field.present() && !u.is_neutral(field.json())) unsupported(field, u.neutral);
  }
  // The Responses API's structured outputs: text.format (text.verbosity and the like only shape the answer).
  if (endpoint == Endpoint::responses) {
    const Field format = body["text"]["format"];
    if (format.present() && !is_text_format(format.json())) unsupported(format, "{\"type\": \"text\"}");
  }
}

}  // namespace moeserve::server
