// DeepSeek-R1's chat format: the template's text and ids, earlier reasoning dropped, and replies read back as
// reasoning and content, streamed or whole, with characters split across tokens.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "chat/r1_chat.h"
#include "tokenizer/deepseek_tokenizer_test.h"
#include "util/error.h"

namespace moeserve::chat {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using Role = ChatTurn::Role;

const Tokenizer& r1() {
  static const std::unique_ptr<Tokenizer> t = Tokenizer::from_file(testing::deepseek_r1_tokenizer_json());
  return *t;
}

TEST(R1Chat, TemplateText) {
  const std::vector<ChatTurn> one = {{Role::user, "What is 2+2?"}};
  EXPECT_EQ(render_r1_text(one, true), "<｜begin▁of▁sentence｜><｜User｜>What is 2+2?<｜Assistant｜><think>\n");
  EXPECT_EQ(render_r1_text(one, false), "<｜begin▁of▁sentence｜><｜User｜>What is 2+2?");
  // System prompts go first, joined by a blank line; an earlier reply keeps only what follows its last </think>.
  const std::vector<ChatTurn> turns = {{Role::system, "Be brief."},
                                       {Role::user, "Hi"},
                                       {Role::assistant, "thinking</think>more</think>Hello!"},
                                       {Role::system, "Use English."},
                                       {Role::user, "Bye"}};
  EXPECT_EQ(render_r1_text(turns, true),
            "<｜begin▁of▁sentence｜>Be brief.\n\nUse English.<｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜>"
            "<｜User｜>Bye<｜Assistant｜><think>\n");
}

TEST(R1Chat, PromptIdsAreTheTemplateTokenised) {
  const std::vector<int32_t> ids = render_r1_user_prompt(r1(), "hi");
  EXPECT_THAT(ids, ElementsAre(0, 128803, 6366, 128804, 128798, 201));
  // DeepSeek-V3's tokenizer has no <think>: rendering R1's template with it is an error, not other ids.
  EXPECT_THAT([] { render_r1_user_prompt(testing::deepseek_v3_tokenizer(), "hi"); },
              ThrowsMessage<Error>(HasSubstr("no <think> token")));
}

TEST(R1Chat, RepliesReadAsReasoningThenContent) {
  const std::vector<int32_t> ids = r1().encode("Two and two.</think>It is 4.<｜end▁of▁sentence｜>", AllowedSpecial::all());
  R1Reply reply = parse_r1_reply(r1(), ids);
  EXPECT_EQ(reply.reasoning, "Two and two.");
  EXPECT_EQ(reply.content, "It is 4.");
  EXPECT_TRUE(reply.stopped);
  // A model that opens the reasoning itself; a reply cut inside the reasoning; tokens after the end (generated
  // under ignore_eos) are read on, the end itself not text, as vLLM reads them.
  reply = parse_r1_reply(r1(), r1().encode("<think>\nhm</think>ok", AllowedSpecial::all()));
  EXPECT_EQ(reply.reasoning, "\nhm");
  EXPECT_EQ(reply.content, "ok");
  EXPECT_FALSE(reply.stopped);
  reply = parse_r1_reply(r1(), r1().encode("still thinking", AllowedSpecial::all()));
  EXPECT_EQ(reply.reasoning, "still thinking");
  EXPECT_EQ(reply.content, "");
  reply = parse_r1_reply(r1(), r1().encode("a</think>b<｜end▁of▁sentence｜>c", AllowedSpecial::all()));
  EXPECT_EQ(reply.content, "bc");
  EXPECT_TRUE(reply.stopped);
}

TEST(R1Chat, StreamedDeltasKeepCharactersWhole) {
  // An emoji as its four bytes, one byte-level token each, on both sides of </think>.
  const std::string emoji = "👋";
  std::vector<int32_t> ids;
  auto add_bytes = [&] {
    for (char byte : emoji) ids.push_back(r1().ranks().find(std::string_view(&byte, 1)));
  };
  add_bytes();
  ids.push_back(*r1().special_id("</think>"));
  add_bytes();
  R1ReplyStream stream(r1());
  std::vector<std::string> reasoning, content;
  for (int32_t id : ids) {
    const auto d = stream.push(id);
    if (!d.reasoning.empty()) reasoning.push_back(d.reasoning);
    if (!d.content.empty()) content.push_back(d.content);
  }
  EXPECT_THAT(reasoning, ElementsAre(emoji));
  EXPECT_THAT(content, ElementsAre(emoji));
  EXPECT_FALSE(stream.in_reasoning());
}

}  // namespace
}  // namespace moeserve::chat
