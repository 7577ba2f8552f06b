// libFuzzer target: the streaming Harmony parser on arbitrary token sequences, strict and lenient. Malformed
// sequences must end in an Error, never a crash; parse_assistant_reply must never throw.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "harmony/completion.h"
#include "harmony/parser.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

const moeserve::Tokenizer& tokenizer() {
  static const auto t = moeserve::Tokenizer::o200k_harmony();
  return *t;
}

// Even first byte: the rest is text with special tokens (reaches well-formed Harmony easily). Odd: ids, three
// bytes each, biased towards the Harmony specials.
std::vector<moeserve::TokenId> token_ids(const uint8_t* data, size_t size) {
  using moeserve::TokenId;
  if (size == 0) return {};
  if (data[0] % 2 == 0) {
    try {
      return tokenizer().encode(std::string(reinterpret_cast<const char*>(data + 1), size - 1),
                                moeserve::AllowedSpecial::all());
    } catch (const moeserve::Error&) {
      return {};
    }
  }
  std::vector<TokenId> ids;
  for (size_t i = 1; i + 3 <= size; i += 3) {
    const uint32_t v = data[i] | data[i + 1] << 8 | data[i + 2] << 16;
    ids.push_back(v % 4 == 0 ? static_cast<TokenId>(199998 + v % 16) : static_cast<TokenId>(v % 201100) - 5);
  }
  return ids;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moeserve;
  const std::vector<TokenId> ids = token_ids(data, size);
  for (bool strict : {true, false}) {
    for (std::optional<harmony::Role> role : {std::optional(harmony::Role::assistant), std::optional<harmony::Role>()}) {
      harmony::StreamingParser parser(tokenizer(), role, harmony::ParseOptions{strict});
      try {
        for (TokenId id : ids) parser.process(id);
        parser.process_eos();
      } catch (const Error&) {
      }
    }
  }
  harmony::parse_assistant_reply(tokenizer(), ids);
  return 0;
}
