#include "server/engine_requests.h"

#include <fmt/format.h>

#include "harmony/completion.h"
#include "harmony/render.h"
#include "chat/r1_chat.h"
#include "server/conversation.h"
#include "server/r1_conversation.h"
#include "server/structured_outputs.h"
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
  // The Responses API has no n (one response, one output); chat and completions take up to 128 choices.
  if (endpoint == Endpoint::responses)
    if (auto n = body["n"].optional_int(1, 128); n && *n != 1)
      body["n"].fail("must be 1 on the Responses API (n > 1 is served by chat completions and completions)");
}

int choices(const Field& body) { return static_cast<int>(body["n"].optional_int(1, 128).value_or(1)); }

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

// vLLM's min_tokens holds the request's stop tokens back (the engine bans them) and checks no stop string before
// it; this server would cut at a stop string from the first token, so the two together are refused.
void check_min_tokens_without_stops(const Field& body, const LogitsProcessing& processing) {
  if (processing.min_tokens > 0 && body["stop"].present() && !stop_strings(body, RequestLimits{}).empty())
    body["min_tokens"].fail("is not supported together with stop strings (only with stop_token_ids)");
}

// model_stops: the tokens that end the model's turn (Harmony's, or the family's EOS), which ignore_eos drops.
AssistantRequest assistant_request(const Field& body, const Field& input, std::vector<TokenId> prompt,
                                   const std::vector<TokenId>& model_stops,
                                   const RequestContext& ctx, std::initializer_list<const char*> max_token_fields) {
  AssistantRequest out;
  out.spec.prompt = std::move(prompt);
  out.spec.sampling = sampling_params(body, ctx.draw_seed());
  out.spec.max_tokens = max_new_tokens(body, ctx, input, out.spec.prompt.size(), max_token_fields, INT32_MAX);
  out.spec.processing = logits_processing(body, ctx.vocab_size, out.spec.max_tokens);
  // vLLM's ignore_eos: generation goes on past the model's stop tokens; stop_token_ids end it too.
  if (!body["ignore_eos"].optional_bool().value_or(false)) out.spec.stop_tokens = model_stops;
  for (int32_t id : stop_token_ids(body, ctx.vocab_size)) out.spec.stop_tokens.push_back(id);
  check_min_tokens_without_stops(body, out.spec.processing);
  out.stream = body["stream"].optional_bool().value_or(false);
  return out;
}

// Where the final channel's content starts: <|channel|>final<|message|>.
std::vector<TokenId> final_channel_header(const Tokenizer& tokenizer) {
  std::vector<TokenId> ids = {o200k::kChannel};
  tokenizer.encode_ordinary_into("final", ids);
  ids.push_back(o200k::kMessage);
  return ids;
}

// Structured outputs of an assistant's answer constrain its final channel only: the grammar starts after the
// channel's header, so the analysis channel is free.
void constrain_final_channel(const Field& body, std::shared_ptr<const structured::TokenGrammar> grammar,
                             const char* format_field, const RequestContext& ctx, AssistantRequest& out) {
  out.spec.grammar = std::move(grammar);
  if (!out.spec.grammar) return;
  if (out.spec.processing.min_tokens > 0)
    body["min_tokens"].fail(fmt::format("cannot be combined with {}", format_field));
  out.spec.grammar_trigger = final_channel_header(ctx.tokenizer);
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

}  // namespace

// tool_choice naming a tool: the prompt goes on with the call's header (harmony's commentary message to
// functions.NAME with <|constrain|>json), the arguments are constrained to the tool's parameters schema, and
// <|call|> alone ends them.
void force_tool_call(const Field& body, const harmony::ToolDescription& tool, const RequestContext& ctx,
                     AssistantRequest& out) {
  const Field choice = body["tool_choice"];
  if (out.spec.grammar) body["response_format"].fail("cannot be combined with a forced tool call (tool_choice)");
  if (ctx.grammars == nullptr) choice.fail("cannot force a call on this server (no constrained decoding)");
  out.primed = {o200k::kChannel};
  ctx.tokenizer.encode_ordinary_into("commentary to=functions." + tool.name + " ", out.primed);
  out.primed.push_back(o200k::kConstrain);
  ctx.tokenizer.encode_ordinary_into("json", out.primed);
  out.primed.push_back(o200k::kMessage);
  out.spec.prompt.insert(out.spec.prompt.end(), out.primed.begin(), out.primed.end());
  const json schema = tool.parameters ? json::parse(tool.parameters->dump()) : json{{"type", "object"}};
  try {
    out.spec.grammar = ctx.grammars->json_schema(schema);
  } catch (const Error& e) {
    choice.fail(fmt::format("names '{}', whose parameters cannot be used for constrained decoding: {}", tool.name,
                            e.what()));
  }
  out.spec.grammar_trigger.clear();
  out.spec.stop_tokens = {o200k::kCall};
  if (out.spec.processing.min_tokens > 0) body["min_tokens"].fail("cannot be combined with a forced tool call");
}

RequestSpec nth_choice(const RequestSpec& first, int i) {
  RequestSpec choice = first;
  choice.sampling.seed += static_cast<uint64_t>(i);
  return choice;
}

AssistantRequest chat_request(std::string_view body_text, const RequestContext& ctx) {
  const json parsed = parse_request_body(body_text, ctx.limits.json_depth);
  const Field body(parsed);
  check_common(body, ctx, Endpoint::chat);
  // OpenAI: logprobs true returns each output token's logprob; top_logprobs (0-20) needs it.
  const bool logprobs = body["logprobs"].optional_bool().value_or(false);
  const std::optional<int64_t> top = body["top_logprobs"].optional_int(0, kMaxTopLogprobs);
  if (top && !logprobs && *top > 0) body["top_logprobs"].fail("needs 'logprobs' to be true");
  AssistantRequest out;
  if (ctx.r1_chat) {
    // DeepSeek-R1: its template, stopping at end of sentence (generation_config.json's eos_token_id). Its reply
    // reasons before it answers, with no channel header to start a grammar at: response_format is refused
    // (before any schema is compiled), {"type": "text"} aside.
    const std::vector<chat::ChatTurn> turns = r1_chat_turns(body, ctx.limits);
    if (const Field format = body["response_format"]; format.present() && format["type"].string() != "text")
      format.fail("is not supported for DeepSeek-R1 models (constrained decoding is for gpt-oss)");
    const auto r1_prompt = [&] { return chat::render_r1_prompt(ctx.tokenizer, turns); };
    out = assistant_request(body, body["messages"], render(r1_prompt), ctx.eos_token_ids, ctx,
                            {"max_completion_tokens", "max_tokens"});
    out.r1_reply = true;
  } else {
    const ConversationRequest conversation = chat_conversation(body, ctx.limits);
    out = assistant_request(body, body["messages"], render(conversation, ctx), harmony::assistant_stop_tokens(), ctx,
                            {"max_completion_tokens", "max_tokens"});
    constrain_final_channel(body, response_format_grammar(body, ctx.grammars), "response_format", ctx, out);
    if (conversation.forced_tool) force_tool_call(body, *conversation.forced_tool, ctx, out);
  }
  if (logprobs) out.spec.top_logprobs = static_cast<int>(top.value_or(0));
  out.n = choices(body);
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
  AssistantRequest out = assistant_request(body, body["input"], render(responses_conversation(body, ctx.limits), ctx),
                                           harmony::assistant_stop_tokens(), ctx, {"max_output_tokens"});
  constrain_final_channel(body, text_format_grammar(body, ctx.grammars), "text.format", ctx, out);
  return out;
}

CompletionRequest completion_request(std::string_view body_text, const RequestContext& ctx) {
  const json parsed = parse_request_body(body_text, ctx.limits.json_depth);
  const Field body(parsed);
  check_common(body, ctx, Endpoint::completions);
  // logprobs: N top tokens besides each token's own (OpenAI allows 5, vLLM up to its --max-logprobs, 20).
  const std::optional<int64_t> logprobs = body["logprobs"].optional_int(0, kMaxTopLogprobs);
  const bool ignore_eos = body["ignore_eos"].optional_bool().value_or(false);  // vLLM's extension, for benchmarks
  const std::vector<int32_t> stop_ids = stop_token_ids(body, ctx.vocab_size);
  CompletionRequest out;
  out.echo = body["echo"].optional_bool().value_or(false);
  out.stops = stop_strings(body, ctx.limits);
  out.n = choices(body);
  const auto prompts = completion_prompts(body, ctx);
  if (prompts.size() * out.n > ctx.limits.messages)
    body["n"].fail(fmt::format("asks for {} choices of {} prompts; at most {} choices are allowed", out.n,
                               prompts.size(), ctx.limits.messages));
  for (std::vector<TokenId> prompt : prompts) {
    if (prompt.empty()) body["prompt"].fail("is empty");
    RequestSpec spec;
    spec.prompt = std::move(prompt);
    spec.sampling = sampling_params(body, ctx.draw_seed());
    // OpenAI's default for /v1/completions is 16 tokens.
    spec.max_tokens = max_new_tokens(body, ctx, body["prompt"], spec.prompt.size(), {"max_tokens"}, 16);
    spec.processing = logits_processing(body, ctx.vocab_size, spec.max_tokens);
    check_min_tokens_without_stops(body, spec.processing);
    if (!ignore_eos) spec.stop_tokens = ctx.eos_token_ids;
    spec.stop_tokens.insert(spec.stop_tokens.end(), stop_ids.begin(), stop_ids.end());
    if (logprobs) spec.top_logprobs = static_cast<int>(*logprobs);
    spec.prompt_logprobs = out.echo && logprobs && spec.prompt.size() > 1;
    spec.grammar = response_format_grammar(body, ctx.grammars);  // the whole completion is the document
    if (spec.grammar && spec.processing.min_tokens > 0) body["min_tokens"].fail("cannot be combined with response_format");
    const size_t first = out.specs.size();
    out.specs.push_back(std::move(spec));
    for (int i = 1; i < out.n; ++i) out.specs.push_back(nth_choice(out.specs[first], i));
  }
  out.stream = body["stream"].optional_bool().value_or(false);
  out.include_usage = include_usage(body);
  return out;
}

}  // namespace moeserve::server
