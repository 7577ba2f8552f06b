#include "tokenizer/incremental_decoder.h"

#include "tokenizer/utf8.h"

namespace moeserve {

std::string IncrementalDecoder::push(TokenId id) {
  pending_ += tokenizer_.token_bytes(id);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const Utf8Step step = utf8_step(std::string_view(pending_).substr(i));
    if (step.status == Utf8Step::incomplete) break;
    if (step.status == Utf8Step::valid) {
      out.append(pending_, i, step.length);
    } else {
      out += kReplacementCharacter;
    }
    i += step.length;
  }
  pending_.erase(0, i);
  return out;
}

std::string IncrementalDecoder::finish() {
  std::string out = pending_.empty() ? "" : std::string(kReplacementCharacter);
  pending_.clear();
  return out;
}

}  // namespace moeserve
