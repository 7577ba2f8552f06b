// libFuzzer target: the tokenizer on arbitrary bytes. Encoding either fails with an Error (ill-formed UTF-8 or a
// disallowed special token) or round-trips; decoding arbitrary ids either fails with an Error (unknown id) or
// yields text that the incremental decoder reproduces piece by piece; the linear byte-pair encoder makes the
// merge loop's tokens.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

const moeserve::Tokenizer& tokenizer() {
  static const auto t = moeserve::Tokenizer::o200k_harmony();
  return *t;
}

void check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "tokenizer_fuzz: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moeserve;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const std::vector<TokenId> ids = tokenizer().encode_ordinary(text);
    check(tokenizer().decode_bytes(ids) == text, "encode_ordinary does not round-trip");
    const std::vector<TokenId> with_specials = tokenizer().encode(text, AllowedSpecial::all());
    check(tokenizer().decode_bytes(with_specials) == text, "encode with specials does not round-trip");
  } catch (const Error&) {
  }
  std::vector<TokenId> ids(size / 4);
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * 4);
  for (TokenId& id : ids) id = static_cast<TokenId>(static_cast<uint32_t>(id) % 201100u) - 5;  // mostly valid
  try {
    const std::string decoded = tokenizer().decode(ids);
    IncrementalDecoder decoder(tokenizer());
    std::string streamed;
    for (TokenId id : ids) streamed += decoder.push(id);
    streamed += decoder.finish();
    check(streamed == decoded, "incremental decoding differs from decode");
  } catch (const Error&) {
  }
  // The linear byte-pair encoder against the merge loop, on the input as one piece (any bytes are a piece).
  if (!text.empty()) {
    std::vector<TokenId> linear, merged;
    byte_pair_encode_linear(tokenizer().ranks(), text, linear);
    byte_pair_encode_heap(tokenizer().ranks(), text, merged);
    check(linear == merged, "the linear byte-pair encoder differs from the merge loop");
  }
  return 0;
}
