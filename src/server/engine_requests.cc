#include "server/engine_requests.h"

#include <fmt/format.h>

#include "harmony/completion.h"
#include "harmony/render.h"
#include "chat/r1_chat.h"
#include "server/conversation.h"
#include "server/r1_conversation.h"
#include "server/unsupported_parameters.h"
#include "util/error.h"

namespace moeserve::server {

using nlohmann::json;

namespace {

void check_model(const Field& body, const RequestContext& ctx) {
  const std::string model = body["model"].string();
  if (model != ctx.served_model_name)
    throw ApiError(404, fmt::format("The model '{}' does not exist (this server serves '{}')", model,
                                    ctx.served_model_name),
                   "invalid_request_error", "model", "model_not_found");
}

// Checks shared by the three endpoints: the model, the parameters no endpoint implements, n.
void check_common(const Field& body, const RequestContext& ctx, Endpoint endpoint) {
  check_model(body, ctx);
  reject_unsupported_parameters(body, endpoint);
  if (auto n = body["n"].optional_int(1, 128); n && *n != 1) body["n"].fail("must be 1 (only n = 1 is supported)");
}

// max_tokens (or max_completion_tokens / max_output_tokens) against what the context and KV pool allow.
int max_new_tokens(const Field& body, const RequestContext& ctx, const Field& prompt, size_t prompt_tokens,
                   std::initializer_list<const char*> fields, int64_t default_cap) {
  const int64_t room = ctx.max_sequence_tokens - static_cast<int64_t>(prompt_tokens);
  if (room < 1)
    prompt.fail(fmt::format("has {} tokens; this server's limit for prompt plus output is {}", prompt_tokens,
                            ctx.max_sequence_tokens));
  for (const char* name : fields) {
    const Field field = body[name];
    if (auto v = field.optional_int(1, INT32_MAX)) {
      if (*v > room)
        field.fail(fmt::format("is {}, but the {}-token prompt leaves room for {} (limit {})", *v, prompt_tokens, room,
                               ctx.max_sequence_tokens));
      return static_cast<int>(*v);
    }
  }
  return static_cast<int>(std::min(room, default_cap));
}

bool include_usage(const Field& body) { return body["stream_options"]["include_usage"].optional_bool().value_or(false); }

template <typename Render>
std::vector<TokenId> render(const Render& render_prompt) {
  try {
    return render_prompt();
  } catch (const Error& e) {
    throw bad_request(fmt::format("the conversation cannot be rendered: {}", e.what()));
  }
}

std::vector<TokenId> render(const ConversationRequest& conversation, const RequestContext& ctx) {
  return render([&] { return harmony::render_conversation_for_completion(ctx.tokenizer, conversation.conversation); });
}

AssistantRequest assistant_request(const Field& body, const Field& input, std::vector<TokenId> prompt,
                                   const RequestContext& ctx, std::initializer_list<const char*> max_token_fields) {
  AssistantRequest out;
  out.spec.prompt = std::move(prompt);
  out.spec.sampling = sampling_params(body, ctx.draw_seed());
  out.spec.max_tokens = max_new_tokens(body, ctx, input, out.spec.prompt.size(), max_token_fields, INT32_MAX);
  out.spec.stop_tokens = harmony::assistant_stop_tokens();
  out.stream = body["stream"].optional_bool().value_or(false);
  return out;
}

// One completions prompt: text, or token ids (integers inside the model's vocabulary).
std::vector<TokenId> completion_prompt(const Field& prompt, const RequestContext& ctx, TextBudget& text) {
  if (prompt.is_string()) {
    try {
      return ctx.tokenizer.encode(text.take(prompt, prompt.string()), AllowedSpecial::all());
    } catch (const Error& e) {
      prompt.fail(fmt::format("cannot be tokenized: {}", e.what()));
    }
  }
  if (!prompt.is_array()) prompt.fail("must be a string, a list of token ids, or a list of those");
  const json& list = prompt.json();
  std::vector<TokenId> ids;
  ids.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const json& id = list[i];
    const bool in_vocabulary = id.is_number_integer() && (id.is_number_unsigned() || id.get<int64_t>() >= 0) &&
                               id.get<uint64_t>() < static_cast<uint64_t>(ctx.vocab_size);
    if (!in_vocabulary)
      prompt.item(i).fail(fmt::format("is {}; a token id must be an integer from 0 to {} (the model's vocabulary)",
                                      id.dump(), ctx.vocab_size - 1));
    ids.push_back(static_cast<TokenId>(id.get<int64_t>()));
  }
  return ids;
}

// "prompt": a string, a list of token ids, or a list of either (a batch).
std::vector<std::vector<TokenId>> completion_prompts(const Field& body, const RequestContext& ctx) {
  const Field prompt = body["prompt"];
  if (!prompt.present()) prompt.fail("is required");
  TextBudget text(ctx.limits.text_bytes);
  const bool batch = prompt.is_array() && !prompt.json().empty() &&
                     (prompt.json()[0].is_string() || prompt.json()[0].is_array());
  if (!batch) return {completion_prompt(prompt, ctx, text)};
  std::vector<std::vector<TokenId>> prompts;
  for (const Field& item : prompt.items(ctx.limits.messages)) prompts.push_back(completion_prompt(item, ctx, text));
  return prompts;
}

// vLLM's min_tokens: no stop token or stop string may end the output before it. With ignore_eos and no stop
// strings nothing can end it before max_tokens, so it holds as long as it is not above max_tokens (benchmarks send
// min_tokens = max_tokens this way); otherwise the engine would have to hold its stop tokens back, which it does
// not do.
void check_min_tokens(const Field& body, bool ignore_eos, bool has_stops, int max_tokens) {
  const Field field = body["min_tokens"];
  const int64_t min_tokens = field.optional_int(0, INT32_MAX).value_or(0);
  if (min_tokens == 0) return;
  if (!ignore_eos || has_stops)
    field.fail("is not supported (only null or 0 is accepted, or any value with ignore_eos and no stop strings)");
  if (min_tokens > max_tokens) field.fail(fmt::format("is {}, above max_tokens ({})", min_tokens, max_tokens));
}

}  // namespace

AssistantRequest chat_request(std::string_view body_text, const RequestContext& ctx) {
  const json parsed = parse_request_body(body_text, ctx.limits.json_depth);
  const Field body(parsed);
  check_common(body, ctx, Endpoint::chat);
  if (body["logprobs"].optional_bool().value_or(false)) body["logprobs"].fail("is not supported");
  if (ctx.r1_chat) {
    // DeepSeek-R1: its template, stopping at end of sentence (generation_config.json's eos_token_id).
    const std::vector<chat::ChatTurn> turns = r1_chat_turns(body, ctx.limits);
    AssistantRequest out = assistant_request(body, body["messages"],
                                             render([&] { return chat::render_r1_prompt(ctx.tokenizer, turns); }), ctx,
                                             {"max_completion_tokens", "max_tokens"});
    out.spec.stop_tokens = ctx.eos_token_ids;
    out.r1_reply = true;
    out.include_usage = include_usage(body);
    out.stops = stop_strings(body, ctx.limits);
    return out;
  }
  AssistantRequest out =
      assistant_request(body, body["messages"], render(chat_conversation(body, ctx.limits), ctx), ctx,
                        {"max_completion_tokens", "max_tokens"});
  out.include_usage = include_usage(body);
  out.stops = stop_strings(body, ctx.limits);
  return out;
}

AssistantRequest responses_request(std::string_view body_text, const RequestContext& ctx) {
  const json parsed = parse_request_body(body_text, ctx.limits.json_depth);
  const Field body(parsed);
  check_common(body, ctx, Endpoint::responses);
  if (ctx.r1_chat)
    throw bad_request("the Responses API is served for gpt-oss models; DeepSeek-R1 answers /v1/chat/completions");
  return assistant_request(body, body["input"], render(responses_conversation(body, ctx.limits), ctx), ctx,
                           {"max_output_tokens"});
}

CompletionRequest completion_request(std::string_view body_text, const RequestContext& ctx) {
  const json parsed = parse_request_body(body_text, ctx.limits.json_depth);
  const Field body(parsed);
  check_common(body, ctx, Endpoint::completions);
  if (body["logprobs"].present()) body["logprobs"].fail("is not supported");
  if (body["echo"].optional_bool().value_or(false)) body["echo"].fail("is not supported");
  const bool ignore_eos = body["ignore_eos"].optional_bool().value_or(false);  // vLLM's extension, for benchmarks
  CompletionRequest out;
  out.stops = stop_strings(body, ctx.limits);
  for (auto& prompt : completion_prompts(body, ctx)) {
    if (prompt.empty()) body["prompt"].fail("is empty");
    RequestSpec spec;
    spec.prompt = std::move(prompt);
    spec.sampling = sampling_params(body, ctx.draw_seed());
    // OpenAI's default for /v1/completions is 16 tokens.
    spec.max_tokens = max_new_tokens(body, ctx, body["prompt"], spec.prompt.size(), {"max_tokens"}, 16);
    check_min_tokens(body, ignore_eos, !out.stops.empty(), spec.max_tokens);
    if (!ignore_eos) spec.stop_tokens = ctx.eos_token_ids;
    out.specs.push_back(std::move(spec));
  }
  out.stream = body["stream"].optional_bool().value_or(false);
  out.include_usage = include_usage(body);
  return out;
}

}  // namespace moeserve::server
