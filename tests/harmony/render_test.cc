#include "harmony/render.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "harmony/parser.h"
#include "harmony_test_util.h"
#include "util/error.h"

namespace moeserve::harmony {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using testing::tokenizer;

TEST(HarmonyRender, MessageAndConversationAgree) {
  const Message hello = Message::text(Role::user, "Hello");
  const std::vector<TokenId> message = render_message(tokenizer(), hello);
  EXPECT_EQ(render_conversation(tokenizer(), {hello}), message);
  const std::vector<TokenId> completion = render_conversation_for_completion(tokenizer(), {hello});
  ASSERT_EQ(completion.size(), message.size() + 2);
  EXPECT_TRUE(std::equal(message.begin(), message.end(), completion.begin()));
  EXPECT_EQ(completion.back(), 173781);  // "assistant"
}

TEST(HarmonyRender, TrainingEndsAFinalAnswerWithReturn) {
  const Conversation final_answer = {Message::text(Role::user, "hi"),
                                     Message::text(Role::assistant, "hello").with_channel("final")};
  std::vector<TokenId> training = render_conversation_for_training(tokenizer(), final_answer);
  std::vector<TokenId> regular = render_conversation(tokenizer(), final_answer);
  EXPECT_EQ(regular.back(), o200k::kEnd);
  EXPECT_EQ(training.back(), o200k::kReturn);
  regular.pop_back();
  training.pop_back();
  EXPECT_EQ(training, regular);
  const Conversation question = {Message::text(Role::user, "hi")};
  EXPECT_EQ(render_conversation_for_training(tokenizer(), question), render_conversation(tokenizer(), question));
}

TEST(HarmonyRender, ToolCallsEndWithCallAndConstrainIsSpecial) {
  // harmony's test_tool_call_with_constrain_tokenized_correctly.
  const std::string text =
      "<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>"
      "{\"location\": \"Tokyo\"}<|call|>";
  const Message call = Message::text(Role::assistant, "{\"location\": \"Tokyo\"}")
                           .with_channel("commentary")
                           .with_recipient("functions.get_weather")
                           .with_content_type("<|constrain|>json");
  const std::vector<TokenId> ids = tokenizer().encode(text, AllowedSpecial::all());
  EXPECT_EQ(render_conversation(tokenizer(), {call}), ids);
  StreamingParser parser(tokenizer(), std::nullopt);
  for (TokenId id : ids) parser.process(id);
  EXPECT_EQ(parser.messages(), std::vector<Message>{call});
}

TEST(HarmonyRender, SpecialTokenTextInContentStaysText) {
  const std::vector<TokenId> ids =
      render_message(tokenizer(), Message::text(Role::user, "print('<|end|>')"));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), o200k::kEnd), 1);
  EXPECT_EQ(tokenizer().decode(ids), "<|start|>user<|message|>print('<|end|>')<|end|>");
}

TEST(HarmonyRender, AuthorNamesAndRecipients) {
  Message named = Message::text(Role::user, "hi");
  named.name = "alice";
  EXPECT_EQ(tokenizer().decode(render_message(tokenizer(), named)), "<|start|>user:alice<|message|>hi<|end|>");
  const Message to_all = Message::text(Role::user, "hi").with_recipient("all");
  EXPECT_EQ(tokenizer().decode(render_message(tokenizer(), to_all)), "<|start|>user<|message|>hi<|end|>");
}

TEST(HarmonyRender, MisplacedContentIsAnError) {
  EXPECT_THAT([] { render_message(tokenizer(), Message{Role::user, {}, {}, {}, {}, SystemContent{}}); },
              ThrowsMessage<Error>(HasSubstr("system content in a user message")));
  EXPECT_THAT([] { render_message(tokenizer(), Message{Role::system, {}, {}, {}, {}, DeveloperContent{}}); },
              ThrowsMessage<Error>(HasSubstr("developer content in a system message")));
  EXPECT_THAT([] { render_message(tokenizer(), Message::text(Role::tool, "{}")); },
              ThrowsMessage<Error>(HasSubstr("a tool message needs the tool's name")));
  EXPECT_THAT([] { render_message(tokenizer(), Message::text(Role::user, "bad \xff")); },
              ThrowsMessage<Error>(HasSubstr("not valid UTF-8")));
}

TEST(HarmonyRender, ReasoningEffortNames) {
  EXPECT_EQ(parse_reasoning_effort("low"), ReasoningEffort::low);
  EXPECT_EQ(parse_reasoning_effort("high"), ReasoningEffort::high);
  EXPECT_THAT([] { parse_reasoning_effort("extreme"); },
              ThrowsMessage<Error>(HasSubstr("must be low, medium or high, not \"extreme\"")));
}

}  // namespace
}  // namespace moeserve::harmony
