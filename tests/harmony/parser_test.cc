#include "harmony/parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "harmony_test_util.h"
#include "util/error.h"

namespace moeserve::harmony {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using testing::tokenizer;

std::vector<TokenId> ids(const std::string& text) { return tokenizer().encode(text, AllowedSpecial::all()); }

std::vector<Message> parse(const std::vector<TokenId>& tokens, std::optional<Role> role, bool strict = true) {
  StreamingParser parser(tokenizer(), role, ParseOptions{strict});
  for (TokenId t : tokens) parser.process(t);
  parser.process_eos();
  return parser.messages();
}

const Message kWeatherCall = Message::text(Role::assistant, "{\"latitude\":48.8566,\"longitude\":2.3522}")
                                 .with_channel("commentary")
                                 .with_recipient("functions.get_weather")
                                 .with_content_type("<|constrain|>json");

TEST(HarmonyParser, ConstrainAdjacentToRecipient) {
  // harmony's test_tool_call_with_channel_before_recipient_and_constrain_adjacent and ..._marker_adjacent.
  EXPECT_EQ(parse(ids("<|start|>assistant<|channel|>commentary to=functions.get_weather<|constrain|>json<|message|>"
                      "{\"latitude\":48.8566,\"longitude\":2.3522}<|call|>"),
                  std::nullopt),
            std::vector<Message>{kWeatherCall});
  EXPECT_EQ(parse(ids("<|start|>assistant to=functions.get_weather<|channel|>commentary<|constrain|>json<|message|>"
                      "{\"latitude\":48.8566,\"longitude\":2.3522}<|end|>"),
                  std::nullopt),
            std::vector<Message>{kWeatherCall});
}

TEST(HarmonyParser, StreamsHeaderFieldsAndContentDeltas) {
  StreamingParser parser(tokenizer(), Role::assistant);
  EXPECT_EQ(parser.state(), StreamingParser::State::header);
  for (TokenId t : ids("<|channel|>final<|message|>")) parser.process(t);
  ASSERT_TRUE(parser.current().has_value());
  EXPECT_EQ(parser.current()->channel, "final");
  std::string streamed;
  for (TokenId t : tokenizer().encode_ordinary("Hi 💖 there")) {
    parser.process(t);
    streamed += parser.last_content_delta();
    EXPECT_EQ(parser.current()->text_content(), streamed);
  }
  EXPECT_EQ(streamed, "Hi 💖 there");
  parser.process(o200k::kReturn);
  EXPECT_EQ(parser.state(), StreamingParser::State::expect_start);
  ASSERT_EQ(parser.messages().size(), 1u);
  EXPECT_EQ(parser.messages()[0].text_content(), "Hi 💖 there");
}

TEST(HarmonyParser, InvalidUtf8InContentBecomesReplacementCharacters) {
  // harmony's test_streamable_parser_invalid_utf8_decoding*: token 9552 is " \xF0\x9F".
  std::vector<TokenId> tokens = ids("<|start|>assistant<|message|>");
  tokens.insert(tokens.end(), {9552, 9552});
  for (TokenId t : ids("worked<|end|>")) tokens.push_back(t);
  EXPECT_EQ(parse(tokens, std::nullopt)[0].text_content(), " \uFFFD \uFFFDworked");

  tokens = ids("<|start|>assistant<|message|>");
  tokens.push_back(9552);
  for (TokenId t : tokenizer().encode_ordinary("XY")) tokens.push_back(t);
  tokens.push_back(o200k::kEnd);
  EXPECT_EQ(parse(tokens, std::nullopt)[0].text_content(), " \uFFFDXY");

  // Flushed at the end of the stream, and kept apart from the next message.
  tokens = ids("<|start|>assistant<|message|>");
  tokens.push_back(9552);
  for (TokenId t : ids("Hi")) tokens.push_back(t);
  EXPECT_EQ(parse(tokens, std::nullopt)[0].text_content(), " \uFFFDHi");
  tokens = ids("<|start|>assistant<|message|>");
  tokens.insert(tokens.end(), {9552, 9552, o200k::kEnd});
  for (TokenId t : ids("<|start|>assistant<|message|>Hi<|end|>")) tokens.push_back(t);
  EXPECT_EQ(parse(tokens, std::nullopt)[1].text_content(), "Hi");

  // An id outside the vocabulary (harmony's test_parse_completion_with_invalid_content_token_errors_on_eos).
  tokens = ids("<|start|>assistant<|channel|>analysis<|message|>Practice invalid token handling.");
  tokens.push_back(INT32_MAX);
  EXPECT_EQ(parse(tokens, std::nullopt)[0].text_content(), "Practice invalid token handling.\uFFFD");
}

TEST(HarmonyParser, MissingMessageTokenStrictAndLenient) {
  // harmony's test_streamable_parser_missing_message_token*.
  const std::vector<std::pair<std::string, Message>> cases = {
      {"I must refuse<|end|>", Message::text(Role::assistant, "I must refuse")},
      {"<|channel|>analysis I must refuse<|end|>",
       Message::text(Role::assistant, "I must refuse").with_channel("analysis")},
  };
  const std::string rest =
      "<|start|>assistant<|channel|>analysis<|message|>We must refuse<|end|>"
      "<|start|>assistant<|channel|>final<|message|>I'm sorry, but I can't help with that.<|return|>";
  for (const auto& [start, first] : cases) {
    const std::vector<TokenId> tokens = ids(start + rest);
    EXPECT_THAT([&] { parse(tokens, Role::assistant); },
                ThrowsMessage<Error>(HasSubstr("unexpected tokens remaining in message header")));
    const std::vector<Message> lenient = parse(tokens, Role::assistant, false);
    ASSERT_EQ(lenient.size(), 3u);
    EXPECT_EQ(lenient[0], first);
    EXPECT_EQ(lenient[1], Message::text(Role::assistant, "We must refuse").with_channel("analysis"));
    EXPECT_EQ(lenient[2].text_content(), "I'm sorry, but I can't help with that.");
  }
  const std::vector<TokenId> tool = ids(
      "... Let's use the tool.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json"
      "<|message|>{\"location\": \"Tokyo\"}<|call|>");
  const std::vector<Message> lenient = parse(tool, Role::assistant, false);
  ASSERT_EQ(lenient.size(), 2u);
  EXPECT_EQ(lenient[0].text_content(), "... Let's use the tool.");
  EXPECT_EQ(lenient[1], Message::text(Role::assistant, "{\"location\": \"Tokyo\"}")
                            .with_channel("commentary")
                            .with_recipient("functions.get_weather")
                            .with_content_type("json"));
}

TEST(HarmonyParser, MalformedSequencesAreErrors) {
  EXPECT_THAT([] { parse(ids("hello"), std::nullopt); },
              ThrowsMessage<Error>(HasSubstr("expected <|start|> (200006) at token 0, got 24912")));
  EXPECT_THAT([] { parse(ids("<|start|>assistant<|channel|>final"), std::nullopt); },
              ThrowsMessage<Error>(HasSubstr("the stream ended inside a message header")));
  EXPECT_THAT([] { parse(ids("<|start|><|message|>x<|end|>"), std::nullopt); },
              ThrowsMessage<Error>(HasSubstr("the message header has no role")));
  EXPECT_THAT([] { parse(ids("<|start|>wizard<|message|>x<|end|>"), std::nullopt); },
              ThrowsMessage<Error>(HasSubstr("unknown role \"wizard\"")));
  EXPECT_THAT([] { parse(ids("<|start|>assistant<|channel|><|message|>x<|end|>"), std::nullopt); },
              ThrowsMessage<Error>(HasSubstr("has <|channel|> but no channel name")));
  EXPECT_THAT([] { parse(ids("<|start|>assistant<|message|>a<|end|>b"), std::nullopt); },
              ThrowsMessage<Error>(HasSubstr("at token 5")));
  EXPECT_THAT([] { parse({o200k::kStart, 132990, 9552, o200k::kMessage}, std::nullopt); },
              ThrowsMessage<Error>(HasSubstr("does not decode")));
}

TEST(HarmonyParser, HeaderParsing) {
  const ParsedHeader tool = parse_header("browser.search to=assistant<|channel|>commentary", std::nullopt, true);
  EXPECT_EQ(tool.message.role, Role::tool);
  EXPECT_EQ(tool.message.name, "browser.search");
  EXPECT_EQ(tool.message.recipient, "assistant");
  EXPECT_EQ(tool.message.channel, "commentary");
  const ParsedHeader lenient = parse_header("<|channel|>analysis I must refuse", Role::assistant, false);
  EXPECT_EQ(lenient.remaining, "I must refuse");
  EXPECT_EQ(lenient.message.channel, "analysis");
}

}  // namespace
}  // namespace moeserve::harmony
