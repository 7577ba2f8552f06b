// Constrained decoding at the token level: which of the vocabulary's tokens keep the output a prefix of a
// document the schema allows. A token is allowed exactly when the character-level matcher (json_matcher.h)
// accepts all its bytes from the current state; special tokens never are (the engine adds the request's stop
// tokens once the document is whole). Masks are cached per matcher state, so a schema's states cost their mask
// once; a state's first mask tries, per first byte the state accepts, the tokens that start with it, except in
// a string's plain text, where a token of plain characters (no quote, backslash or control byte, whole UTF-8
// characters) is allowed by its length alone and only the others are tried.
#pragma once

#include <array>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "structured/json_matcher.h"

namespace moeserve::structured {

// One bit per token: bit t % 32 of word t / 32 (sampling/logit_edit.h's token_allowed()).
using TokenMask = std::vector<uint32_t>;

class TokenVocabulary {
 public:
  // token_bytes[id]: the bytes of token id; special[id]: a control token, never part of a document.
  TokenVocabulary(std::vector<std::string> token_bytes, std::vector<bool> special);

  size_t size() const { return bytes_.size(); }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  bool special(int32_t id) const { return special_[id]; }
  // Characters of a token of plain string text; -1 for any other token.
  int32_t plain_chars(int32_t id) const { return plain_chars_[id]; }
  const std::vector<int32_t>& starting_with(uint8_t byte) const { return by_first_byte_[byte]; }
  // Tokens that are not plain string text, by first byte.
  const std::vector<int32_t>& not_plain_starting_with(uint8_t byte) const { return not_plain_by_first_byte_[byte]; }

 private:
  std::vector<std::string> bytes_;
  std::vector<bool> special_;
  std::vector<int32_t> plain_chars_;
  std::array<std::vector<int32_t>, 256> by_first_byte_, not_plain_by_first_byte_;
};

class TokenGrammar {
 public:
  TokenGrammar(JsonSchema schema, std::shared_ptr<const TokenVocabulary> vocabulary);

  MatcherState start() const { return matcher_.start(); }
  bool complete(const MatcherState& state) const { return matcher_.complete(state); }
  // The tokens allowed in this state (no special token among them). Thread-safe; cached.
  std::shared_ptr<const TokenMask> mask(const MatcherState& state) const;
  // The same, computed afresh without the cache (the benchmark's and the property test's handle on it).
  TokenMask compute_mask(const MatcherState& state) const;
  // Feeds a token's bytes; false when the token is not allowed (state is then failed).
  bool advance(MatcherState& state, int32_t token) const;

  const JsonMatcher& matcher() const { return matcher_; }
  const TokenVocabulary& vocabulary() const { return *vocabulary_; }

 private:
  JsonSchema schema_;
  JsonMatcher matcher_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<std::string, std::shared_ptr<const TokenMask>> cache_;
};

// Compiled grammars by schema (its compact JSON text), so a schema is compiled once; bounded, oldest out first.
class GrammarCache {
 public:
  explicit GrammarCache(std::shared_ptr<const TokenVocabulary> vocabulary, size_t capacity = 64)
      : vocabulary_(std::move(vocabulary)), capacity_(capacity) {}
  // Throws moeserve::Error when the schema is not supported (json_schema.h).
  std::shared_ptr<const TokenGrammar> json_schema(const nlohmann::json& schema);
  std::shared_ptr<const TokenGrammar> json_object();

 private:
  std::shared_ptr<const TokenGrammar> get(const std::string& key, const std::function<JsonSchema()>& compile);
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  size_t capacity_;
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const TokenGrammar>> grammars_;
  std::vector<std::string> order_;
};

}  // namespace moeserve::structured
