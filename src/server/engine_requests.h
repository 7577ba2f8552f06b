// Request bodies of /v1/chat/completions, /v1/completions and /v1/responses turned into engine requests, without
// an engine: the body parsed (depth-limited), every field checked (request_fields.h), unsupported parameters
// refused, the conversation rendered as Harmony and tokenised, token ids and lengths checked against the model.
// Any problem is an ApiError (400 naming the field, 404 for another model). The server runs this on its render
// workers; the request fuzz target (fuzz/openai_request_fuzz.cc) drives it directly.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "server/request_fields.h"
#include "structured/token_mask.h"
#include "tokenizer/tokenizer.h"

namespace moeserve::server {

// What the requests are checked against.
struct RequestContext {
  const Tokenizer& tokenizer;
  std::string served_model_name;
  int32_t vocab_size = 0;           // the model's: token ids of a prompt must be below it
  int64_t max_sequence_tokens = 0;  // prompt plus output, as the engine can hold it
  std::vector<TokenId> eos_token_ids;
  RequestLimits limits;
  // The sampling seed of a request (each prompt of a completions batch) that gives none: drawn per request
  // from the server's --seed.
  std::function<uint64_t()> draw_seed;
  // Compiled response_format grammars; null: structured outputs are refused.
  structured::GrammarCache* grammars = nullptr;
  // A DeepSeek-R1 model (the DeepSeek-V3 family): chat in R1's template (r1_conversation.h), no Responses API.
  bool r1_chat = false;
};

// A chat completion or a Responses API response: Harmony in, Harmony out (or R1's template and replies).
struct AssistantRequest {
  RequestSpec spec;  // choice 0's
  int n = 1;         // chat's choices: choice i is nth_choice(spec, i)
  bool stream = false;
  bool include_usage = false;
  std::vector<std::string> stops;
  // A forced tool call: the call's header, which ends the prompt; the answer's reader takes it as the output's
  // start, so that the generated arguments come back as that call's.
  std::vector<TokenId> primed;
  bool r1_reply = false;  // the reply is read as DeepSeek-R1's: reasoning up to </think>, then content
};

// Choice i of n for one prompt (vLLM's child requests): choice 0's request with seed + i.
RequestSpec nth_choice(const RequestSpec& first, int i);

AssistantRequest chat_request(std::string_view body, const RequestContext& ctx);
AssistantRequest responses_request(std::string_view body, const RequestContext& ctx);

// /v1/completions: one engine request per prompt, raw text out.
struct CompletionRequest {
  // n choices per prompt: specs[p * n + i] is choice i of prompt p (choice 0 first), as vLLM numbers them.
  std::vector<RequestSpec> specs;
  int n = 1;
  bool echo = false;  // the prompt's text (and with logprobs its tokens' logprobs) before the completion
  bool stream = false;
  bool include_usage = false;
  std::vector<std::string> stops;
};

CompletionRequest completion_request(std::string_view body, const RequestContext& ctx);

}  // namespace moeserve::server
