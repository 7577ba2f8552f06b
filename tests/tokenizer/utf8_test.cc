#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace moeserve {
namespace {

constexpr std::string_view kFFFD = "\xEF\xBF\xBD";

TEST(Utf8, Steps) {
  EXPECT_EQ(utf8_step("a").status, Utf8Step::valid);
  EXPECT_EQ(utf8_step("\xC3\xA9").length, 2u);
  EXPECT_EQ(utf8_step("\xF0\x9F\x98\x80").length, 4u);
  const Utf8Step incomplete = utf8_step("\xF0\x9F\x98");
  EXPECT_EQ(incomplete.status, Utf8Step::incomplete);
  EXPECT_EQ(incomplete.length, 3u);
  EXPECT_EQ(utf8_step("\x80").status, Utf8Step::invalid);
  EXPECT_EQ(utf8_step("\xC0\xAF").status, Utf8Step::invalid);  // overlong
  const Utf8Step surrogate = utf8_step("\xED\xA0\x80");        // U+D800
  EXPECT_EQ(surrogate.status, Utf8Step::invalid);
  EXPECT_EQ(surrogate.length, 1u);
  EXPECT_EQ(utf8_step("\xF4\x90\x80\x80").status, Utf8Step::invalid);  // above U+10FFFF
  const Utf8Step broken = utf8_step("\xF0\x9F" "A");
  EXPECT_EQ(broken.status, Utf8Step::invalid);
  EXPECT_EQ(broken.length, 2u);  // the maximal subpart: one U+FFFD for both bytes
}

TEST(Utf8, FindInvalid) {
  EXPECT_EQ(find_invalid_utf8("plain ASCII text that is longer than eight bytes"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("héllo wörld 👋"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("0123456789abcdef\xff"), 16u);
  EXPECT_EQ(find_invalid_utf8("ab\xE2\x82"), 2u);  // truncated at the end
}

TEST(Utf8, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(utf8_lossy(" \xF0\x9F \xF0\x9F" "worked"), std::string(" ") + std::string(kFFFD) + " " +
                                                          std::string(kFFFD) + "worked");
  EXPECT_EQ(utf8_lossy("\xE0\x80"), std::string(kFFFD) + std::string(kFFFD));
  EXPECT_EQ(utf8_lossy("ok"), "ok");
}

}  // namespace
}  // namespace moeserve
