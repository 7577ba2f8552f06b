// vLLM's tokenizer routes (vllm/entrypoints/serve/tokenize/protocol.py, as documented on docs.vllm.ai):
// POST /tokenize with {"prompt": text} or {"messages": [...]} (rendered as a chat completion would render them,
// so its count is the chat request's prompt_tokens), answered {"count", "max_model_len", "tokens", "token_strs"};
// POST /detokenize with {"tokens": [...]}, answered {"prompt": text}. "model" is optional, as in vLLM, and must
// name the served model when given. Errors are ApiErrors (400 naming the field, 404 for another model).
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

#include "server/engine_requests.h"

namespace moeserve::server {

nlohmann::json tokenize_response(std::string_view body, const RequestContext& ctx);
nlohmann::json detokenize_response(std::string_view body, const RequestContext& ctx);

}  // namespace moeserve::server
