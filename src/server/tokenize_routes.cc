#include "server/tokenize_routes.h"

#include <fmt/format.h>

namespace moeserve::server {

using nlohmann::json;

namespace {

void check_optional_model(const Field& body, const RequestContext& ctx) {
  const auto model = body["model"].optional_string();
  if (model && *model != ctx.served_model_name)
    throw ApiError(
        404, fmt::format("The model '{}' does not exist (this server serves '{}')", *model, ctx.served_model_name),
        "invalid_request_error", "model", "model_not_found");
}

}  // namespace

json tokenize_response(std::string_view body_text, const RequestContext& ctx) {
  const json parsed = parse_request_body(body_text, ctx.limits.json_depth);
  const Field body(parsed);
  check_optional_model(body, ctx);
  const bool token_strs = body["return_token_strs"].optional_bool().value_or(false);
  std::vector<TokenId> tokens;
  if (body["messages"].present()) {
    // Harmony always ends a rendered conversation with the assistant's turn, and has no way to continue a
    // final message: say so rather than return tokens the model would never see.
    if (!body["add_generation_prompt"].optional_bool().value_or(true))
      body["add_generation_prompt"].fail("is not supported (only true: Harmony renders the assistant's turn)");
    if (body["continue_final_message"].optional_bool().value_or(false))
      body["continue_final_message"].fail("is not supported (only false)");
    json chat = {{"model", ctx.served_model_name}, {"messages", parsed["messages"]}};
    for (const char* key : {"tools", "tool_choice", "reasoning_effort"})
      if (parsed.contains(key)) chat[key] = parsed[key];
    tokens = chat_request(chat.dump(), ctx).spec.prompt;
  } else {
    // GPT-OSS's tokenizer adds no BOS or other special tokens, so add_special_tokens changes nothing; special-token
    // text in the prompt is read as those tokens, as Hugging Face tokenizers (and so vLLM) read it. The flag's
    // type is still checked.
    body["add_special_tokens"].optional_bool();
    TextBudget text(ctx.limits.text_bytes);
    tokens = ctx.tokenizer.encode(text.take(body["prompt"], body["prompt"].string()), AllowedSpecial::all());
  }
  json out = {{"count", tokens.size()},
              {"max_model_len", ctx.max_sequence_tokens},
              {"tokens", tokens},
              {"token_strs", nullptr}};
  if (token_strs) {
    // Each token's own text (bytes that are not UTF-8 on their own become U+FFFD); vLLM's are the tokenizer's
    // vocabulary strings.
    json strs = json::array();
    for (TokenId t : tokens) strs.push_back(ctx.tokenizer.decode(std::span<const TokenId>(&t, 1)));
    out["token_strs"] = std::move(strs);
  }
  return out;
}

json detokenize_response(std::string_view body_text, const RequestContext& ctx) {
  const json parsed = parse_request_body(body_text, ctx.limits.json_depth);
  const Field body(parsed);
  check_optional_model(body, ctx);
  const Field list = body["tokens"];
  if (!list.is_array()) list.fail(list.present() ? "must be a list of token ids" : "is required");
  std::vector<TokenId> tokens;
  for (const Field& t : list.items(ctx.limits.text_bytes)) {
    if (!t.present()) t.fail("must be a token id");
    tokens.push_back(static_cast<TokenId>(*t.optional_int(0, ctx.vocab_size - 1)));
  }
  return {{"prompt", ctx.tokenizer.decode(tokens)}};
}

}  // namespace moeserve::server
