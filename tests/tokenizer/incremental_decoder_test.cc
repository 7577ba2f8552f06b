#include "tokenizer/incremental_decoder.h"

#include <gtest/gtest.h>

#include "tokenizer/utf8.h"

namespace moeserve {
namespace {

const Tokenizer& tokenizer() {
  static const std::unique_ptr<Tokenizer> t = Tokenizer::o200k_harmony();
  return *t;
}

std::string stream(const std::vector<TokenId>& ids, std::vector<std::string>* deltas = nullptr) {
  IncrementalDecoder decoder(tokenizer());
  std::string out;
  for (TokenId id : ids) {
    std::string delta = decoder.push(id);
    if (deltas != nullptr) deltas->push_back(delta);
    out += delta;
  }
  return out + decoder.finish();
}

TEST(IncrementalDecoder, WaitsForTheRestOfACharacter) {
  const std::vector<TokenId> ids = tokenizer().encode_ordinary("💖");
  ASSERT_GE(ids.size(), 2u);
  std::vector<std::string> deltas;
  EXPECT_EQ(stream(ids, &deltas), "💖");
  EXPECT_EQ(deltas.front(), "");
  EXPECT_EQ(deltas.back(), "💖");
}

TEST(IncrementalDecoder, ConcatenationEqualsDecode) {
  // harmony's test_streamable_parser_tricky_utf8_decoding text.
  const std::string text =
      "Hello Müller, Γειά σου, Привет, שלום, مرحبا, नमस्ते, こんにちは, 안녕하세요, 你好. Normalized (naïve) vs. "
      "decomposed (nai\xCC\x88ve) characters. Some emojis: 😊👋🏾👨‍👩‍👧‍👦🇺🇸.";
  const std::vector<TokenId> ids = tokenizer().encode_ordinary(text);
  std::vector<std::string> deltas;
  EXPECT_EQ(stream(ids, &deltas), text);
  for (const std::string& d : deltas) EXPECT_EQ(find_invalid_utf8(d), std::string::npos) << d;
}

TEST(IncrementalDecoder, ReplacesBytesThatCannotComplete) {
  // Token 9552 is " \xF0\x9F": a space and the start of a four-byte character (harmony's invalid-UTF-8 tests).
  std::vector<TokenId> ids = {9552, 9552};
  for (TokenId id : tokenizer().encode_ordinary("worked")) ids.push_back(id);
  std::vector<std::string> deltas;
  EXPECT_EQ(stream(ids, &deltas), " \xEF\xBF\xBD \xEF\xBF\xBDworked");
  EXPECT_EQ(deltas[0], " ");
  EXPECT_EQ(stream({9552}), " \xEF\xBF\xBD");  // finish() flushes the truncated character
}

}  // namespace
}  // namespace moeserve
