// Logprobs as OpenAI's two APIs write them. Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs":
// [{"token", "logprob", "bytes"}]}], "refusal": null}. Completions (the legacy shape lm-evaluation-harness
// reads): {"tokens", "token_logprobs", "top_logprobs": [{text: logprob}], "text_offset"}, with null for the
// first prompt token under echo (nothing predicts it). A token's text is its bytes where they are whole UTF-8,
// else its decoding with U+FFFD (chat's "bytes" keeps the exact bytes).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <span>
#include <string>

#include "sampling/logprobs.h"
#include "tokenizer/tokenizer.h"

namespace moeserve::server {

std::string token_text(const Tokenizer& tokenizer, TokenId id);

// {"content": [...], "refusal": null} for these tokens.
nlohmann::json chat_logprobs(const Tokenizer& tokenizer, std::span<const TokenLogprobs> tokens);

// The completions shape, built a token at a time.
class CompletionLogprobs {
 public:
  explicit CompletionLogprobs(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  // A token with its logprobs, or without (the echoed prompt's first token: null).
  void add(TokenId token, const std::optional<TokenLogprobs>& logprobs);
  const nlohmann::json& value() const { return json_; }
  // What was added since the last take(), in the same shape (for a stream chunk), with offsets kept running.
  nlohmann::json take();

 private:
  const Tokenizer& tokenizer_;
  nlohmann::json json_ = empty();
  nlohmann::json pending_ = empty();
  size_t text_offset_ = 0;
  static nlohmann::json empty();
};

}  // namespace moeserve::server
