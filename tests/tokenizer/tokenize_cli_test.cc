// moeserve tokenize / detokenize, run as a user runs them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "util/files.h"

namespace moeserve {
namespace {

using ::testing::HasSubstr;

// A model directory that holds only the tokenizer (the tiktoken rank file).
std::string model_dir() {
  static const std::string dir = [] {
    const std::string d = testing::temp_dir("tokcli");
    std::filesystem::copy_file(Tokenizer::default_ranks_path(), d + "/o200k_base.tiktoken");
    return d;
  }();
  return dir;
}

testing::CommandResult moeserve(const std::string& arguments) {
  return testing::run_command(std::string(MOESERVE_BINARY) + " " + arguments);
}

TEST(TokenizeCli, PrintsIdsAsJson) {
  const auto result = moeserve("tokenize --model " + model_dir() + " --text 'hello world'");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output, "[24912,2375]\n");
}

TEST(TokenizeCli, LinesRoundTripThroughDetokenize) {
  const std::string dir = testing::temp_dir("tokcli-lines");
  const std::string text = "hello world\n\n  indented\tline 😀\nlast <|end|> line\n";
  write_text_file(dir + "/in.txt", text);
  const auto ids = moeserve("tokenize --model " + model_dir() + " --file " + dir + "/in.txt --lines --ordinary");
  ASSERT_EQ(ids.exit_code, 0) << ids.output;
  EXPECT_THAT(ids.output, ::testing::StartsWith("[24912,2375]\n[]\n"));
  write_text_file(dir + "/ids.txt", ids.output);
  const auto back = moeserve("detokenize --model " + model_dir() + " --file " + dir + "/ids.txt --lines");
  ASSERT_EQ(back.exit_code, 0) << back.output;
  EXPECT_EQ(back.output, text);
}

TEST(TokenizeCli, SpecialTokens) {
  const auto allowed = moeserve("tokenize --model " + model_dir() + " --allow-special --text '<|start|>user'");
  EXPECT_EQ(allowed.output, "[200006,1428]\n");
  const auto refused = moeserve("tokenize --model " + model_dir() + " --text 'say <|start|>'");
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.output, HasSubstr("special token <|start|> at byte offset 4 is not allowed"));
}

TEST(TokenizeCli, BadInputIsAClearError) {
  const std::string dir = testing::temp_dir("tokcli-bad");
  write_text_file(dir + "/bad.txt", "fine\nbad \xC3\x28\n");
  const auto utf8 = moeserve("tokenize --model " + model_dir() + " --file " + dir + "/bad.txt --lines");
  EXPECT_EQ(utf8.exit_code, 1);
  EXPECT_THAT(utf8.output, HasSubstr("line 2: text is not valid UTF-8: ill-formed byte 0xC3 at byte offset 4"));
  const auto unknown = moeserve("detokenize --model " + model_dir() + " --text '[1, 201089]'");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.output, HasSubstr("token id 201089 is not in o200k_harmony"));
  const auto not_json = moeserve("detokenize --model " + model_dir() + " --text '[1, 2'");
  EXPECT_EQ(not_json.exit_code, 1);
  EXPECT_THAT(not_json.output, HasSubstr("not a JSON array of token ids"));
  const auto no_tokenizer = moeserve("tokenize --model " + dir + " --text hi");
  EXPECT_EQ(no_tokenizer.exit_code, 1);
  EXPECT_THAT(no_tokenizer.output, HasSubstr("has no tokenizer"));
}

}  // namespace
}  // namespace moeserve
