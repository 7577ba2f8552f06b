#include "server/logprobs_json.h"

#include <utility>

namespace moeserve::server {

using nlohmann::json;

std::string token_text(const Tokenizer& tokenizer, TokenId id) {
  const TokenId ids[] = {id};
  return tokenizer.decode(ids);
}

namespace {

json bytes_of(const Tokenizer& tokenizer, TokenId id) {
  json bytes = json::array();
  for (const char c : tokenizer.token_bytes(id)) bytes.push_back(static_cast<unsigned char>(c));
  return bytes;
}

json chat_entry(const Tokenizer& tokenizer, const TokenLogprob& t) {
  return {{"token", token_text(tokenizer, t.token)}, {"logprob", t.logprob}, {"bytes", bytes_of(tokenizer, t.token)}};
}

}  // namespace

json chat_logprobs(const Tokenizer& tokenizer, std::span<const TokenLogprobs> tokens) {
  json content = json::array();
  for (const TokenLogprobs& t : tokens) {
    json entry = chat_entry(tokenizer, t.chosen);
    entry["top_logprobs"] = json::array();
    for (const TokenLogprob& top : t.top) entry["top_logprobs"].push_back(chat_entry(tokenizer, top));
    content.push_back(std::move(entry));
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

json CompletionLogprobs::empty() {
  return {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
          {"text_offset", json::array()}};
}

void CompletionLogprobs::add(TokenId token, const std::optional<TokenLogprobs>& logprobs) {
  const std::string text = token_text(tokenizer_, token);
  for (json* out : {&json_, &pending_}) {
    (*out)["tokens"].push_back(text);
    (*out)["text_offset"].push_back(text_offset_);
    if (!logprobs) {
      (*out)["token_logprobs"].push_back(nullptr);
      (*out)["top_logprobs"].push_back(nullptr);
      continue;
    }
    (*out)["token_logprobs"].push_back(logprobs->chosen.logprob);
    json top = json::object();
    for (const TokenLogprob& t : logprobs->top) top[token_text(tokenizer_, t.token)] = t.logprob;
    (*out)["top_logprobs"].push_back(std::move(top));
  }
  text_offset_ += text.size();
}

json CompletionLogprobs::take() { return std::exchange(pending_, empty()); }

}  // namespace moeserve::server
