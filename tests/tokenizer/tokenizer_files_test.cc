#include "tokenizer/tokenizer_files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test_util.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

const Tokenizer& tokenizer() {
  static const std::unique_ptr<Tokenizer> t = Tokenizer::o200k_harmony();
  return *t;
}

const std::string kSample = "GPT-OSS's tokenizer: 123 ünïcode, 中文, 👋🏽 and\n\n   spaces.";

// Writes the first `keep` bytes of a file's text (or the text with one edit) as a new file.
std::string variant(const std::string& text, const std::string& name) {
  const std::string path = testing::temp_dir("tokfile") + "/" + name;
  write_text_file(path, text);
  return path;
}

TEST(TiktokenFile, RoundTrips) {
  const std::string path = testing::temp_dir("tiktoken") + "/o200k_base.tiktoken";
  write_tiktoken_ranks(tokenizer().ranks(), path);
  EXPECT_EQ(sha256_file(path), "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d");
  const auto loaded = Tokenizer::from_file(path);
  EXPECT_EQ(loaded->encode_ordinary(kSample), tokenizer().encode_ordinary(kSample));
}

TEST(TiktokenFile, MalformedFilesAreErrors) {
  const std::string good = read_text_file(Tokenizer::default_ranks_path());
  const size_t line1000 = [&] {
    size_t at = 0;
    for (int i = 0; i < 1000; ++i) at = good.find('\n', at) + 1;
    return at;
  }();
  EXPECT_THAT([&] { Tokenizer::from_file(variant(good.substr(0, line1000), "short.tiktoken")); },
              ThrowsMessage<Error>(HasSubstr("truncated rank file: 1000 ranks, o200k_base has 199998")));
  EXPECT_THAT([&] { Tokenizer::from_file(variant(good.substr(0, line1000 - 3), "cut.tiktoken")); },
              ThrowsMessage<Error>(HasSubstr("truncated rank file (the last line has no newline)")));
  EXPECT_THAT([&] { Tokenizer::from_file(variant("IQ== 0\nIg==1\n", "nospace.tiktoken")); },
              ThrowsMessage<Error>(HasSubstr("nospace.tiktoken:2: expected \"<base64 token> <rank>\"")));
  EXPECT_THAT([&] { Tokenizer::from_file(variant("IQ== 0\n*** 1\n", "base64.tiktoken")); },
              ThrowsMessage<Error>(HasSubstr(":2: \"***\" is not base64")));
  EXPECT_THAT([&] { Tokenizer::from_file(variant("IQ== 0\nIg== 0\n", "dup.tiktoken")); },
              ThrowsMessage<Error>(HasSubstr(":2: rank 0 appears twice")));
  EXPECT_THAT([&] { Tokenizer::from_file(variant("IQ== x\n", "rank.tiktoken")); },
              ThrowsMessage<Error>(HasSubstr(":1: rank \"x\" is not a number")));
  EXPECT_THAT([&] { Tokenizer::from_file(variant("IQ== 5\n", "gap.tiktoken")); },
              ThrowsMessage<Error>(HasSubstr("rank 0 is missing")));
  EXPECT_THAT([&] { Tokenizer::from_file(variant("", "empty.tiktoken")); },
              ThrowsMessage<Error>(HasSubstr("empty rank file")));
  EXPECT_THAT([&] { Tokenizer::from_file("/nonexistent/o200k_base.tiktoken"); },
              ThrowsMessage<Error>(HasSubstr("cannot open /nonexistent/o200k_base.tiktoken")));
}

TEST(HfTokenizerJson, RoundTripsLikeGptOssShipsIt) {
  const std::string dir = testing::temp_dir("hfjson");
  write_tokenizer_files(tokenizer(), dir);
  const nlohmann::json json = read_json_file(dir + "/tokenizer.json");
  EXPECT_EQ(json["model"]["type"], "BPE");
  EXPECT_EQ(json["model"]["vocab"].size(), 199998u);
  EXPECT_EQ(json["model"]["vocab"]["Ġhello"], 40617);
  EXPECT_EQ(json["model"]["merges"].size(), 446189u);  // as in GPT-OSS's tokenizer.json
  EXPECT_EQ(json["added_tokens"].size(), 21u);
  EXPECT_EQ(json["added_tokens"][20]["content"], "<|endofprompt|>");
  EXPECT_EQ(json["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"], std::string(o200k::kPattern));

  const auto loaded = Tokenizer::from_model_dir(dir);
  EXPECT_EQ(loaded->encode_ordinary(kSample), tokenizer().encode_ordinary(kSample));
  EXPECT_EQ(loaded->encode("<|start|><|endofprompt|>", AllowedSpecial::all()), (std::vector<TokenId>{200006, 200018}));
  EXPECT_EQ(loaded->decode(std::vector<TokenId>{200012}), "<|call|>");

  // Truncated anywhere: an error naming the byte, never a crash.
  const std::string text = read_text_file(dir + "/tokenizer.json");
  // What the tokenizer checks of the file's contents names the file too.
  const auto edited = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return variant(t.replace(at, from.size(), to), "tokenizer.json");
  };
  EXPECT_THAT([&] { Tokenizer::from_file(edited("\"content\": \"<|start|>\"", "\"content\": \"<|begin|>\"")); },
              ThrowsMessage<Error>(HasSubstr("tokenizer.json: special token 200006 is <|begin|> in the tokenizer file")));
  EXPECT_THAT([&] { Tokenizer::from_file(edited("{\"id\": 200006,", "{\"id\": 4295167302,")); },
              ThrowsMessage<Error>(HasSubstr("has id 4295167302, beyond o200k_harmony's last id")));
  for (size_t keep : {size_t{10}, text.size() / 3, text.size() - 2}) {
    EXPECT_THAT([&] { Tokenizer::from_file(variant(text.substr(0, keep), "tokenizer.json")); },
                ThrowsMessage<Error>(HasSubstr("invalid JSON at byte"))) << keep;
  }
}

// A small tokenizer.json around a shape error; the checks that need the whole vocabulary are covered above.
std::string small_json(const std::string& model, const std::string& pre_tokenizer) {
  return R"({"added_tokens": [], "pre_tokenizer": )" + pre_tokenizer + R"(, "model": )" + model + "}";
}

TEST(HfTokenizerJson, MalformedFilesAreErrors) {
  const std::string split =
      R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "use_regex": false}]})";
  EXPECT_THAT([&] { Tokenizer::from_file(variant(small_json(R"({"type": "BPE", "vocab": {"a": 0}})", split),
                                                 "tokenizer.json")); },
              ThrowsMessage<Error>(HasSubstr("vocab has 1 mergeable tokens, o200k_base has 199998")));
  EXPECT_THAT([&] { Tokenizer::from_file(variant(small_json(R"({"type": "BPE", "vocab": {"a": "zero"}})", split),
                                                 "tokenizer.json")); },
              ThrowsMessage<Error>(HasSubstr("vocab entry \"a\" has id \"zero\"")));
  EXPECT_THAT([&] { Tokenizer::from_file(variant(small_json(R"({"type": "BPE", "vocab": {"\n": 0}})", split),
                                                 "tokenizer.json")); },
              ThrowsMessage<Error>(HasSubstr("is not a byte-level string")));
  EXPECT_THAT([&] { Tokenizer::from_file(variant(small_json(R"({"type": "BPE", "merges": [["a", "b"]]})", split),
                                                 "tokenizer.json")); },
              ThrowsMessage<Error>(HasSubstr("model.merges must come after model.vocab")));
  EXPECT_THAT([&] { Tokenizer::from_file(variant(R"([1, 2])", "tokenizer.json")); },
              ThrowsMessage<Error>(HasSubstr("the top level is not an object")));
  EXPECT_THAT([&] { Tokenizer::from_file(variant(small_json(R"({"type": "BPE"})", split), "tokenizer.json")); },
              ThrowsMessage<Error>(HasSubstr("model.vocab is missing")));
  // Nesting a million levels deep is refused at the limit, not followed down the stack.
  const std::string deep = R"({"normalizer": )" + std::string(1000000, '[') + std::string(1000000, ']') + "}";
  EXPECT_THAT([&] { Tokenizer::from_file(variant(deep, "tokenizer.json")); },
              ThrowsMessage<Error>(HasSubstr("tokenizer.json: normalizer/0/0/0")));
  EXPECT_THAT([&] { Tokenizer::from_file(variant(deep, "tokenizer.json")); },
              ThrowsMessage<Error>(HasSubstr("is nested deeper than 64 levels")));
}

TEST(TiktokenFile, ContentErrorsNameTheFileAndStreamsAreBounded) {
  // Two ranks with the same bytes: the rank table refuses it, and the error says which file.
  std::string text = read_text_file(Tokenizer::default_ranks_path());
  const size_t second_line = text.find('\n') + 1;
  text.replace(second_line, text.find(' ', second_line) - second_line, text.substr(0, text.find(' ')));
  EXPECT_THAT([&] { Tokenizer::from_file(variant(text, "dup_bytes.tiktoken")); },
              ThrowsMessage<Error>(HasSubstr("dup_bytes.tiktoken: rank table: the token of rank 1 repeats rank 0")));
  EXPECT_THAT([] { Tokenizer::from_file("/dev/zero"); },
              ThrowsMessage<Error>(HasSubstr("/dev/zero: larger than 64 MiB")));
}

TEST(HfTokenizerJson, ByteLevelAlphabet) {
  EXPECT_EQ(byte_level_encode(" hello\n"), "ĠhelloĊ");
  std::string bytes;
  ASSERT_TRUE(byte_level_decode("ĠhelloĊ", bytes));
  EXPECT_EQ(bytes, " hello\n");
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  ASSERT_TRUE(byte_level_decode(byte_level_encode(all), bytes));
  EXPECT_EQ(bytes, all);
  EXPECT_FALSE(byte_level_decode(" ", bytes));  // a raw space is not in the alphabet
}

TEST(TokenizerFiles, ModelDirWithoutTokenizer) {
  const std::string dir = testing::temp_dir("notok");
  EXPECT_THAT([&] { Tokenizer::from_model_dir(dir); },
              ThrowsMessage<Error>(HasSubstr("has no tokenizer: expected tokenizer.json or o200k_base.tiktoken")));
}

}  // namespace
}  // namespace moeserve
