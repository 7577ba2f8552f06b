// Streaming detokenisation: tokens arrive one at a time and may end in the middle of a UTF-8 character (an
// emoji is often two or three tokens). push() returns only whole, well-formed characters; bytes that can never
// become well-formed are replaced by U+FFFD as soon as that is certain (one per maximal ill-formed subpart, as
// Tokenizer::decode does); finish() flushes a truncated final character as U+FFFD. So the concatenated output
// equals Tokenizer::decode of all the tokens.
#pragma once

#include <string>

#include "tokenizer/tokenizer.h"

namespace moeserve {

class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  std::string push(TokenId id);
  std::string finish();
  bool has_pending_bytes() const { return !pending_.empty(); }

 private:
  const Tokenizer& tokenizer_;
  std::string pending_;  // the start of a character that the next token may complete
};

}  // namespace moeserve
