#include "server/unsupported_parameters.h"

#include <fmt/format.h>

namespace moeserve::server {

using nlohmann::json;

namespace {

bool is_text_format(const json& v) { return v.is_object() && v.size() == 1 && v.value("type", json()) == "text"; }

// Where a parameter is still refused: a bit per endpoint.
constexpr unsigned kChat = 1, kCompletions = 2, kResponses = 4;

struct Unsupported {
  const char* name;
  const char* neutral;  // what is accepted besides null, for the message
  bool (*is_neutral)(const json&);
  unsigned endpoints;  // where it is refused; elsewhere the endpoint implements it (or checks it itself)
};

// OpenAI's chat, completions and Responses references and vLLM's sampling extensions
// (https://platform.openai.com/docs/api-reference, https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html).
// Implemented and so gone from here: logit_bias, the three penalties, min_tokens, stop_token_ids, ignore_eos
// (request_fields.h), chat's logprobs and top_logprobs, completions' logprobs and echo (engine_requests.cc),
// response_format on chat and completions and text.format on Responses (structured_outputs.h).
constexpr Unsupported kUnsupported[] = {
    {"response_format", "{\"type\": \"text\"}", is_text_format, kResponses},
    {"best_of", "1", [](const json& v) { return v.is_number_integer() && v.get<int64_t>() == 1; }, kChat | kCompletions | kResponses},
    {"suffix", "\"\"", [](const json& v) { return v.is_string() && v.get_ref<const std::string&>().empty(); }, kChat | kCompletions | kResponses},
    {"store", "false", [](const json& v) { return v.is_boolean() && !v.get<bool>(); }, kChat | kCompletions | kResponses},
    {"previous_response_id", "null", [](const json&) { return false; }, kChat | kCompletions | kResponses},
    {"functions", "[]", [](const json& v) { return v.is_array() && v.empty(); }, kChat | kCompletions | kResponses},
    {"top_logprobs", "0", [](const json& v) { return v.is_number_integer() && v.get<int64_t>() == 0; }, kResponses},
};

unsigned bit_of(Endpoint endpoint) {
  switch (endpoint) {
    case Endpoint::chat: return kChat;
    case Endpoint::completions: return kCompletions;
    case Endpoint::responses: return kResponses;
  }
  return 0;
}

[[noreturn]] void unsupported(const Field& field, const char* neutral) {
  field.fail(fmt::format("is not supported (only null or {} is accepted)", neutral));
}

}  // namespace

void reject_unsupported_parameters(const Field& body, Endpoint endpoint) {
  for (const Unsupported& u : kUnsupported) {
    if ((u.endpoints & bit_of(endpoint)) == 0) continue;
    const Field field = body[u.name];
    if (field.present() && !u.is_neutral(field.json())) unsupported(field, u.neutral);
  }
  // The Responses API's logprobs: its output_text parts would carry them, which this server does not write.
  if (endpoint == Endpoint::responses)
    for (const Field& item : body["include"].items(64))
      if (item.optional_string() == "message.output_text.logprobs")
        item.fail("is not supported: the Responses API here returns no logprobs (chat completions does)");
}

}  // namespace moeserve::server
