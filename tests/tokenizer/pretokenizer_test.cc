#include "tokenizer/pretokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace moeserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

std::vector<std::string> pieces(const Pretokenizer& p, std::string_view text) {
  std::vector<std::string> out;
  p.split(text, [&](std::string_view piece) { out.emplace_back(piece); });
  return out;
}

TEST(Pretokenizer, O200kPieces) {
  const Pretokenizer p{std::string(o200k::kPattern)};
  EXPECT_THAT(pieces(p, "Hello, world!  It's 12345 o'clock\n\n\tdone   "),
              ElementsAre("Hello", ",", " world", "!", " ", " It's", " ", "123", "45", " o", "'clock", "\n\n",
                          "\tdone", "   "));
  EXPECT_THAT(pieces(p, "WE'LL see"), ElementsAre("WE'LL", " see"));
  EXPECT_THAT(pieces(p, "a/b\r\n"), ElementsAre("a", "/b", "\r\n"));
}

TEST(Pretokenizer, WhitespaceIsUnicodeWhiteSpace) {
  EXPECT_EQ(translate_whitespace_classes("\\s+(?!\\S)|[^\\s\\p{L}]"),
            "[\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+"
            "(?![^\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}"
            "\\x{3000}])|[^\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
            "\\x{205F}\\x{3000}\\p{L}]");
  // U+180E is not White_Space for tiktoken (PCRE2's own \s would say it is); U+0085 is. Ids from tiktoken.
  static const std::unique_ptr<Tokenizer> t = Tokenizer::o200k_harmony();
  EXPECT_THAT(t->encode_ordinary("x \u180E\u180E y"), ElementsAre(87, 220, 157, 254, 236, 157, 254, 236, 342));
  EXPECT_THAT(t->encode_ordinary("a  \u0085\nb"), ElementsAre(64, 256, 126, 227, 198, 65));
  EXPECT_THAT(t->encode_ordinary("word\u3000\u3000next"), ElementsAre(1801, 1397, 1397, 7311));
}

TEST(Pretokenizer, BadPatternsAreErrors) {
  EXPECT_THAT([] { Pretokenizer p("(unclosed"); }, ThrowsMessage<Error>(HasSubstr("does not compile at offset")));
  const Pretokenizer gaps("a");
  EXPECT_THAT([&] { pieces(gaps, "ba"); }, ThrowsMessage<Error>(HasSubstr("left bytes 0..1 unmatched")));
  const Pretokenizer none("a");
  EXPECT_THAT([&] { pieces(none, "b"); }, ThrowsMessage<Error>(HasSubstr("no piece matches at byte 0")));
}

}  // namespace
}  // namespace moeserve
