#include "structured/token_mask.h"

#include <algorithm>
#include <functional>

#include "util/error.h"

namespace moeserve::structured {

namespace {

constexpr size_t kMasksCachedPerGrammar = 2048;  // 25 KiB each at 201,088 tokens

// Characters of plain string text in `bytes`, or -1: no quote, backslash or control byte, and whole, well-formed
// UTF-8 characters (the matcher's own check decides, so the two cannot disagree on what well-formed is).
int32_t plain_chars_of(const std::string& bytes) {
  if (bytes.empty()) return -1;
  static const JsonSchema any_string = [] {
    JsonSchema s;
    s.nodes.resize(1);
    s.nodes[0].kind = NodeKind::string;
    return s;
  }();
  static const JsonMatcher matcher(any_string);
  for (char c : bytes)
    if (c == '"' || c == '\\') return -1;
  MatcherState state = matcher.start();
  matcher.feed(state, '"');
  if (!matcher.feed(state, bytes) || matcher.plain_string_room(state) < 0) return -1;
  return static_cast<int32_t>(state.frames[state.depth - 1].count);
}

void set_bit(TokenMask& mask, int32_t token) { mask[token >> 5] |= 1u << (token & 31); }

std::string state_key(const MatcherState& s) {
  return std::string(reinterpret_cast<const char*>(s.frames.data()), s.depth * sizeof(Frame));
}

}  // namespace

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes, std::vector<bool> special)
    : bytes_(std::move(token_bytes)), special_(std::move(special)) {
  MOESERVE_CHECK(bytes_.size() == special_.size(), "{} token byte strings for {} special flags", bytes_.size(),
                 special_.size());
  plain_chars_.assign(bytes_.size(), -1);
  for (size_t id = 0; id < bytes_.size(); ++id) {
    if (special_[id] || bytes_[id].empty()) continue;
    const auto token = static_cast<int32_t>(id);
    plain_chars_[id] = plain_chars_of(bytes_[id]);
    const auto first = static_cast<uint8_t>(bytes_[id][0]);
    by_first_byte_[first].push_back(token);
    if (plain_chars_[id] < 0) not_plain_by_first_byte_[first].push_back(token);
  }
}

TokenGrammar::TokenGrammar(JsonSchema schema, std::shared_ptr<const TokenVocabulary> vocabulary)
    : schema_(std::move(schema)), matcher_(schema_), vocabulary_(std::move(vocabulary)) {}

TokenMask TokenGrammar::compute_mask(const MatcherState& state) const {
  const TokenVocabulary& vocab = *vocabulary_;
  TokenMask mask((vocab.size() + 31) / 32, 0);
  if (state.failed) return mask;
  auto try_token = [&](int32_t token) {
    MatcherState s = state;
    if (matcher_.feed(s, vocab.bytes(token))) set_bit(mask, token);
  };
  const int64_t room = matcher_.plain_string_room(state);
  if (room >= 0) {
    for (size_t id = 0; id < vocab.size(); ++id) {
      const int32_t chars = vocab.plain_chars(static_cast<int32_t>(id));
      if (chars >= 0 && chars <= room) set_bit(mask, static_cast<int32_t>(id));
    }
  }
  for (int byte = 0; byte < 256; ++byte) {
    MatcherState s = state;
    matcher_.feed(s, static_cast<uint8_t>(byte));
    if (s.failed) continue;
    const auto& candidates = room >= 0 ? vocab.not_plain_starting_with(static_cast<uint8_t>(byte))
                                       : vocab.starting_with(static_cast<uint8_t>(byte));
    for (int32_t token : candidates) try_token(token);
  }
  return mask;
}

std::shared_ptr<const TokenMask> TokenGrammar::mask(const MatcherState& state) const {
  // A failed state allows nothing (its frames may equal a live state's: it is not a cache key).
  if (state.failed) return std::make_shared<const TokenMask>((vocabulary_->size() + 31) / 32, 0);
  const std::string key = state_key(state);
  {
    std::lock_guard lock(mutex_);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  }
  auto computed = std::make_shared<const TokenMask>(compute_mask(state));
  std::lock_guard lock(mutex_);
  if (cache_.size() >= kMasksCachedPerGrammar) cache_.clear();
  cache_.emplace(key, computed);
  return computed;
}

bool TokenGrammar::advance(MatcherState& state, int32_t token) const {
  if (token < 0 || static_cast<size_t>(token) >= vocabulary_->size() || vocabulary_->special(token)) {
    state.failed = true;
    return false;
  }
  return matcher_.feed(state, vocabulary_->bytes(token));
}

std::shared_ptr<const TokenGrammar> GrammarCache::get(const std::string& key,
                                                      const std::function<JsonSchema()>& compile) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = grammars_.find(key); it != grammars_.end()) return it->second;
  }
  auto grammar = std::make_shared<const TokenGrammar>(compile(), vocabulary_);
  std::lock_guard lock(mutex_);
  if (grammars_.emplace(key, grammar).second) {
    order_.push_back(key);
    if (order_.size() > capacity_) {
      grammars_.erase(order_.front());
      order_.erase(order_.begin());
    }
  }
  return grammars_.at(key);
}

std::shared_ptr<const TokenGrammar> GrammarCache::json_schema(const nlohmann::json& schema) {
  return get("schema:" + schema.dump(), [&] { return compile_json_schema(schema); });
}

std::shared_ptr<const TokenGrammar> GrammarCache::json_object() {
  return get("json_object", [] { return any_json_object(); });
}

}  // namespace moeserve::structured
