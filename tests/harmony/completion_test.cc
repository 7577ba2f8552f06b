#include "harmony/completion.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "harmony_test_util.h"

namespace moeserve::harmony {
namespace {

using ::testing::HasSubstr;
using testing::tokenizer;
using testing::vector_ids;
using testing::vector_text;

TEST(HarmonyCompletion, PromptIsHarmonysDefaultSystemMessageAndTheUser) {
  // With medium effort and "What is 2 + 2?" this is test_simple_convo.txt.
  EXPECT_EQ(tokenizer().decode(render_prompt(tokenizer(), "What is 2 + 2?", ReasoningEffort::medium)),
            vector_text("test_simple_convo.txt"));
  const std::string high = tokenizer().decode(render_prompt(tokenizer(), "Hi", ReasoningEffort::high));
  EXPECT_THAT(high, HasSubstr("\n\nReasoning: high\n\n"));
  EXPECT_TRUE(high.ends_with("<|start|>user<|message|>Hi<|end|><|start|>assistant"));
}

TEST(HarmonyCompletion, StopTokensAreReturnAndCall) {
  EXPECT_EQ(assistant_stop_tokens(), (std::vector<TokenId>{200002, 200012}));
}

TEST(HarmonyCompletion, SplitsAnalysisFromFinal) {
  const AssistantReply reply = parse_assistant_reply(tokenizer(), vector_ids("test_simple_reasoning_response.txt"));
  EXPECT_FALSE(reply.error.has_value());
  EXPECT_EQ(reply.analysis, "User asks: \"What is 2 + 2?\" Simple arithmetic. Provide answer.");
  EXPECT_EQ(reply.final, "2 + 2 = 4.");
  EXPECT_EQ(reply.messages.size(), 2u);
  EXPECT_FALSE(reply.stopped);  // the vector stops before the final <|return|>

  std::vector<TokenId> finished = vector_ids("test_simple_reasoning_response.txt");
  finished.push_back(o200k::kReturn);
  EXPECT_TRUE(parse_assistant_reply(tokenizer(), finished).stopped);
}

TEST(HarmonyCompletion, MalformedOutputIsReportedNotThrown) {
  // A model with random weights emits anything: here text where a header belongs, then the stream ends.
  const std::vector<TokenId> garbage = tokenizer().encode_ordinary("random words");
  const AssistantReply reply = parse_assistant_reply(tokenizer(), garbage);
  ASSERT_TRUE(reply.error.has_value());
  EXPECT_THAT(*reply.error, HasSubstr("ended inside a message header"));
  EXPECT_TRUE(reply.messages.empty());

  std::vector<TokenId> cut = tokenizer().encode("<|channel|>final<|message|>4<|end|>oops", AllowedSpecial::all());
  const AssistantReply partial = parse_assistant_reply(tokenizer(), cut);
  ASSERT_TRUE(partial.error.has_value());
  EXPECT_EQ(partial.final, "4");
}

}  // namespace
}  // namespace moeserve::harmony
