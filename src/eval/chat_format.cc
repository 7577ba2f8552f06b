#include "eval/chat_format.h"

#include "harmony/completion.h"
#include "harmony/render.h"

namespace moeserve::eval {

namespace {

std::string text_of(const harmony::Message& m) {
  const auto* text = std::get_if<std::string>(&m.content);
  return text ? *text : std::string();
}

}  // namespace

std::vector<chat::ChatTurn> r1_turns(const harmony::Conversation& conversation) {
  std::string instructions;
  std::vector<chat::ChatTurn> turns;
  bool first_user = true;
  for (const harmony::Message& m : conversation) {
    if (m.role == harmony::Role::developer) {
      if (const auto* developer = std::get_if<harmony::DeveloperContent>(&m.content); developer && developer->instructions)
        instructions += (instructions.empty() ? "" : "\n\n") + *developer->instructions;
    } else if (m.role == harmony::Role::user) {
      std::string text = text_of(m);
      if (first_user && !instructions.empty()) text = instructions + "\n\n" + text;
      first_user = false;
      turns.push_back({chat::ChatTurn::Role::user, std::move(text)});
    } else if (m.role == harmony::Role::assistant && m.channel.value_or("final") == "final") {
      turns.push_back({chat::ChatTurn::Role::assistant, text_of(m)});
    }
  }
  return turns;
}

EvalChatFormat::EvalChatFormat(const Tokenizer& tokenizer)
    : tokenizer_(tokenizer), r1_(tokenizer.special_id("<｜Assistant｜>").has_value()) {
  stop_tokens_ = r1_ ? std::vector<TokenId>{chat::R1Tokens::of(tokenizer).end_of_sentence} : harmony::assistant_stop_tokens();
}

std::vector<TokenId> EvalChatFormat::render(const harmony::Conversation& conversation) const {
  if (r1_) return chat::render_r1_prompt(tokenizer_, r1_turns(conversation));
  return harmony::render_conversation_for_completion(tokenizer_, conversation);
}

std::string EvalChatFormat::scored_text(std::span<const TokenId> reply) const {
  return r1_ ? tokenizer_.decode_skipping_special(reply) : tokenizer_.decode(reply);
}

std::string EvalChatFormat::answer(std::span<const TokenId> reply) const {
  if (r1_) return chat::parse_r1_reply(tokenizer_, reply).content;
  return harmony::parse_assistant_reply(tokenizer_, reply).final;
}

}  // namespace moeserve::eval
