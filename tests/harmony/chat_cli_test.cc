// moeserve chat on the tiny model (random weights, so its replies are not Harmony: the command must say so for
// each turn and carry on).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_files.h"
#include "util/files.h"

namespace moeserve {
namespace {

using ::testing::HasSubstr;

TEST(ChatCli, HoldsAConversationOverSeveralTurns) {
  const std::string model = testing::tiny_model();
  if (!file_exists(model + "/tokenizer.json")) write_tokenizer_files(*Tokenizer::o200k_harmony(), model);
  const std::string dir = testing::temp_dir("chat");
  write_text_file(dir + "/turns.txt", "What is 2 + 2?\n\nAnd 3 + 5?\n/quit\nnever read\n");
  const auto result = testing::run_command(std::string(MOESERVE_BINARY) + " chat --model " + model +
                                           " --max-tokens 6 --temperature 0 --threads 1 < " + dir + "/turns.txt");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  size_t turns = 0;
  for (size_t at = 0; (at = result.output.find("moeserve: chat: the reply", at)) != std::string::npos; ++at) ++turns;
  EXPECT_EQ(turns, 2u) << result.output;
}

TEST(ChatCli, MissingModelIsAClearError) {
  const auto result = testing::run_command(std::string(MOESERVE_BINARY) + " chat --model /nonexistent < /dev/null");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.output, HasSubstr("/nonexistent has no tokenizer"));
}

}  // namespace
}  // namespace moeserve
