// openai/harmony's parsing vectors (test-data @ec7606d): model output as token ids, and text encoded with all
// special tokens allowed, parsed as harmony's tests parse them.
#include <gtest/gtest.h>

#include "harmony/parser.h"
#include "harmony/render.h"
#include "harmony_test_util.h"

namespace moeserve::harmony {
namespace {

using testing::tokenizer;
using testing::vector_ids;
using testing::vector_text;

std::vector<Message> parse(const std::vector<TokenId>& ids, std::optional<Role> role) {
  StreamingParser parser(tokenizer(), role);
  for (TokenId id : ids) parser.process(id);
  parser.process_eos();
  return parser.messages();
}

// The ids between each <|message|> and the stop token (or the end) that closes it.
std::vector<std::vector<TokenId>> content_runs(const std::vector<TokenId>& ids) {
  std::vector<std::vector<TokenId>> runs;
  bool in_content = false;
  for (TokenId id : ids) {
    if (id == o200k::kMessage) {
      runs.emplace_back();
      in_content = true;
    } else if (id == o200k::kEnd || id == o200k::kReturn || id == o200k::kCall) {
      in_content = false;
    } else if (in_content) {
      runs.back().push_back(id);
    }
  }
  return runs;
}

// Our encoder reproduces the model's ids for each message's content.
void expect_contents_reencode(const std::vector<TokenId>& ids, const std::vector<Message>& messages) {
  const auto runs = content_runs(ids);
  ASSERT_EQ(runs.size(), messages.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(tokenizer().encode_ordinary(messages[i].text_content()), runs[i]) << "message " << i;
  }
}

TEST(HarmonyParseVectors, SimpleReasoningResponse) {
  const std::vector<TokenId> ids = vector_ids("test_simple_reasoning_response.txt");
  ASSERT_EQ(ids.size(), 35u);
  const std::vector<Message> messages = parse(ids, Role::assistant);
  const std::vector<Message> expected = {
      Message::text(Role::assistant, "User asks: \"What is 2 + 2?\" Simple arithmetic. Provide answer.")
          .with_channel("analysis"),
      Message::text(Role::assistant, "2 + 2 = 4.").with_channel("final")};
  EXPECT_EQ(messages, expected);
  expect_contents_reencode(ids, messages);
}

TEST(HarmonyParseVectors, SimpleToolCall) {
  const std::vector<TokenId> ids = vector_ids("test_simple_tool_call.txt");
  ASSERT_EQ(ids.size(), 39u);
  const std::vector<Message> messages = parse(ids, Role::assistant);
  const std::vector<Message> expected = {
      Message::text(Role::assistant, "User asks: \"What is the weather in Tokyo?\" We need to use lookup_weather tool.")
          .with_channel("analysis"),
      Message::text(Role::assistant, "{\"location\": \"Tokyo\"}")
          .with_channel("analysis")
          .with_recipient("lookup_weather")
          .with_content_type("code")};
  EXPECT_EQ(messages, expected);
  expect_contents_reencode(ids, messages);
}

TEST(HarmonyParseVectors, StreamableParser) {
  const std::string text = vector_text("test_streamable_parser.txt");
  const std::vector<TokenId> ids = tokenizer().encode(text, AllowedSpecial::all());
  EXPECT_EQ(tokenizer().decode_utf8(ids), text);
  StreamingParser parser(tokenizer(), Role::assistant);
  for (TokenId id : ids) parser.process(id);
  ASSERT_EQ(parser.messages().size(), 3u);
  const Message& analysis = parser.messages()[0];
  EXPECT_EQ(analysis.channel, "analysis");
  EXPECT_TRUE(analysis.text_content().starts_with("User asks \"Who is the current US president?\""));
  EXPECT_TRUE(analysis.text_content().ends_with("But w\ne need up to date info. Let's browse to confirm."));
  const Message call = Message::text(Role::assistant,
                                     "{\"query\": \"current US president July 2025\", \"topn\": 10, \"source\": \"news\"}")
                           .with_channel("commentary")
                           .with_recipient("browser.search")
                           .with_content_type("code");
  EXPECT_EQ(parser.messages()[1], call);
  const Message result = Message::from_tool("browser.search", "{\"result\": \"https://openai.com/\"}")
                             .with_channel("commentary")
                             .with_recipient("assistant");
  EXPECT_EQ(parser.messages()[2], result);
  // The tool's reply renders back to the vector's last message, id for id.
  const std::vector<TokenId> rendered = render_message(tokenizer(), result);
  ASSERT_LE(rendered.size(), ids.size());
  EXPECT_TRUE(std::equal(rendered.begin(), rendered.end(), ids.end() - static_cast<long>(rendered.size())));
}

TEST(HarmonyParseVectors, ToolResponseParsing) {
  const std::string text = vector_text("test_tool_response_parsing.txt");
  const Message expected = Message::from_tool("browser.search", "{\"result\": \"https://openai.com/\"}")
                               .with_channel("commentary")
                               .with_recipient("assistant");
  std::vector<TokenId> rendered = render_message(tokenizer(), expected);
  ASSERT_EQ(rendered.back(), o200k::kEnd);
  rendered.pop_back();
  EXPECT_EQ(tokenizer().decode_utf8(rendered), text);
  EXPECT_EQ(tokenizer().encode(text, AllowedSpecial::all()), rendered);
  EXPECT_EQ(parse(rendered, std::nullopt), std::vector<Message>{expected});
}

}  // namespace
}  // namespace moeserve::harmony
