#include "tokenizer/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "util/error.h"

namespace moeserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

const Tokenizer& tokenizer() {
  static const std::unique_ptr<Tokenizer> t = Tokenizer::o200k_harmony();
  return *t;
}

TEST(Tokenizer, KnownIds) {
  // harmony's tests (src/tests.rs test_encode_allowed_special) and the reference notes.
  EXPECT_THAT(tokenizer().encode_ordinary("hello world"), ElementsAre(24912, 2375));
  EXPECT_THAT(tokenizer().encode_ordinary("analysis"), ElementsAre(35644));
  EXPECT_THAT(tokenizer().encode_ordinary("final"), ElementsAre(17196));
  EXPECT_THAT(tokenizer().encode_ordinary("assistant"), ElementsAre(173781));
  EXPECT_THAT(tokenizer().encode_ordinary("system"), ElementsAre(17360));
  EXPECT_THAT(tokenizer().encode_ordinary("user"), ElementsAre(1428));
  EXPECT_THAT(tokenizer().encode_ordinary("developer"), ElementsAre(77944));
  EXPECT_THAT(tokenizer().encode_ordinary(" to="), ElementsAre(316, 28));
  EXPECT_THAT(tokenizer().encode_ordinary(" code"), ElementsAre(3490));
  EXPECT_THAT(tokenizer().encode_ordinary("commentary"), ElementsAre(12606, 815));
  EXPECT_TRUE(tokenizer().encode_ordinary("").empty());
}

TEST(Tokenizer, SpecialTokensWhereAllowed) {
  EXPECT_THAT(tokenizer().encode("<|start|>", AllowedSpecial::none().add(o200k::kStart)), ElementsAre(200006));
  EXPECT_THAT(tokenizer().encode("<|start|>", AllowedSpecial::all()), ElementsAre(200006));
  EXPECT_THAT(tokenizer().encode("a<|<|end|>b", AllowedSpecial::all()), ElementsAre(64, 27, 91, 200007, 65));
  // All text ordinary: the characters the name is made of (harmony's test_encode_allowed_special).
  EXPECT_THAT(tokenizer().encode_ordinary("<|start|>"), ElementsAre(27, 91, 5236, 91, 29));
  EXPECT_THAT(tokenizer().encode("<|not_special|>", AllowedSpecial::none()),
              ElementsAre(27, 91, 2878, 100315, 91, 29));
}

// Every "<|" waits for the next "|>": with a megabyte of "<|" before one, the scan for special tokens must not
// search the rest of the text once per "<|" (that was quadratic; the test's timeout bounds it).
TEST(Tokenizer, SpecialTokenScanIsLinearInUnclosedOpeners) {
  std::string openers;
  for (int i = 0; i < (1 << 20); ++i) openers += "<|";
  std::vector<TokenId> expected = tokenizer().encode_ordinary(openers + "x|>");
  expected.push_back(o200k::kEnd);
  EXPECT_EQ(tokenizer().encode(openers + "x|><|end|>", AllowedSpecial::all()), expected);
}

TEST(Tokenizer, DisallowedSpecialTextIsAnError) {
  EXPECT_THAT([] { tokenizer().encode("say <|start|>", AllowedSpecial::none()); },
              ThrowsMessage<Error>(HasSubstr("special token <|start|> at byte offset 4 is not allowed")));
  EXPECT_THAT([] { tokenizer().encode("<|start|><|end|>", AllowedSpecial::none().add(o200k::kStart)); },
              ThrowsMessage<Error>(HasSubstr("<|end|> at byte offset 9")));
}

TEST(Tokenizer, InvalidUtf8IsAnErrorNamingTheOffset) {
  EXPECT_THAT([] { tokenizer().encode_ordinary("abc\xff"); },
              ThrowsMessage<Error>(HasSubstr("byte 0xFF at byte offset 3")));
  EXPECT_THAT([] { tokenizer().encode_ordinary("caf\xc3"); }, ThrowsMessage<Error>(HasSubstr("byte offset 3")));
  EXPECT_THAT([] { tokenizer().encode_ordinary("\xc0\xaf"); }, ThrowsMessage<Error>(HasSubstr("byte offset 0")));
  EXPECT_THAT([] { tokenizer().encode_ordinary("x\xed\xa0\x80"); }, ThrowsMessage<Error>(HasSubstr("offset 1")));
  EXPECT_THAT([] { tokenizer().encode("ok \x80", AllowedSpecial::all()); },
              ThrowsMessage<Error>(HasSubstr("offset 3")));
}

TEST(Tokenizer, DecodeRoundTripsAndNamesSpecials) {
  const std::string text = "Hello, 世界! 👋🏽 Ünïcödé\n\tdone.";
  EXPECT_EQ(tokenizer().decode_utf8(tokenizer().encode_ordinary(text)), text);
  const std::vector<TokenId> ids = {200006, 1428, 200008, 24912, 200007};
  EXPECT_EQ(tokenizer().decode(ids), "<|start|>user<|message|>hello<|end|>");
  EXPECT_EQ(tokenizer().decode(std::vector<TokenId>{200014}), "<|reserved_200014|>");
  EXPECT_EQ(tokenizer().decode(std::vector<TokenId>{201088}), "<|reserved_201088|>");
  EXPECT_TRUE(tokenizer().is_special(200006));
  EXPECT_FALSE(tokenizer().is_special(24912));
  EXPECT_EQ(tokenizer().special_id("<|call|>"), 200012);
  EXPECT_EQ(tokenizer().special_id("<|nope|>"), std::nullopt);
}

TEST(Tokenizer, DecodeRejectsUnknownIds) {
  EXPECT_THAT([] { tokenizer().decode(std::vector<TokenId>{201089}); },
              ThrowsMessage<Error>(HasSubstr("token id 201089 is not in o200k_harmony")));
  EXPECT_THAT([] { tokenizer().decode(std::vector<TokenId>{-1}); }, ThrowsMessage<Error>(HasSubstr("token id -1")));
}

TEST(Tokenizer, DecodeOfSplitCharacters) {
  // harmony's test_invalid_utf8_decoding: these ids do not decode to valid UTF-8.
  const std::vector<TokenId> ids = {132990, 9552};
  EXPECT_THAT([&] { tokenizer().decode_utf8(ids); }, ThrowsMessage<Error>(HasSubstr("invalid UTF-8")));
  EXPECT_THAT(tokenizer().decode(ids), HasSubstr("Chicken"));
  EXPECT_THAT(tokenizer().decode(ids), HasSubstr("\xEF\xBF\xBD"));
  EXPECT_EQ(tokenizer().decode_bytes(std::vector<TokenId>{9552}), " \xF0\x9F");
}

TEST(Tokenizer, LongRunsOfWhitespace) {
  for (const char* unit : {" ", "\t", "\n", " \n", "\u3000"}) {
    std::string text;
    for (int i = 0; i < 5000; ++i) text += unit;
    text += "x";
    EXPECT_EQ(tokenizer().decode_utf8(tokenizer().encode_ordinary(text)), text) << unit;
  }
}

}  // namespace
}  // namespace moeserve
