#include "chat/r1_chat.h"

#include "util/error.h"

namespace moeserve::chat {
namespace {

constexpr const char* kBeginOfSentence = "<｜begin▁of▁sentence｜>";
constexpr const char* kEndOfSentence = "<｜end▁of▁sentence｜>";
constexpr const char* kUser = "<｜User｜>";
constexpr const char* kAssistant = "<｜Assistant｜>";
constexpr const char* kThink = "<think>";
constexpr const char* kEndThink = "</think>";

TokenId required(const Tokenizer& tokenizer, const char* name) {
  const std::optional<TokenId> id = tokenizer.special_id(name);
  MOESERVE_CHECK(id.has_value(), "the tokenizer has no {} token: not DeepSeek-R1's (DeepSeek-V3's names it a placeholder)",
                 name);
  return *id;
}

}  // namespace

R1Tokens R1Tokens::of(const Tokenizer& tokenizer) {
  return {required(tokenizer, kBeginOfSentence), required(tokenizer, kEndOfSentence), required(tokenizer, kThink),
          required(tokenizer, kEndThink)};
}

std::string render_r1_text(std::span<const ChatTurn> turns, bool add_generation_prompt) {
  std::string out = kBeginOfSentence;
  bool first_system = true;
  for (const ChatTurn& t : turns) {
    if (t.role != ChatTurn::Role::system) continue;
    out += (first_system ? "" : "\n\n") + t.content;
    first_system = false;
  }
  for (const ChatTurn& t : turns) {
    if (t.role == ChatTurn::Role::user) {
      out += kUser + t.content;
    } else if (t.role == ChatTurn::Role::assistant) {
      // An earlier reply keeps only what follows its reasoning.
      const size_t end = t.content.rfind(kEndThink);
      out += kAssistant;
      out += end == std::string::npos ? t.content : t.content.substr(end + std::string(kEndThink).size());
      out += kEndOfSentence;
    }
  }
  if (add_generation_prompt) out += std::string(kAssistant) + kThink + "\n";
  return out;
}

std::vector<TokenId> render_r1_prompt(const Tokenizer& tokenizer, std::span<const ChatTurn> turns,
                                      bool add_generation_prompt) {
  R1Tokens::of(tokenizer);  // a tokenizer without the format's tokens would render something else silently
  return tokenizer.encode(render_r1_text(turns, add_generation_prompt), AllowedSpecial::all());
}

std::vector<TokenId> render_r1_user_prompt(const Tokenizer& tokenizer, const std::string& user) {
  const ChatTurn turn{ChatTurn::Role::user, user};
  return render_r1_prompt(tokenizer, std::span(&turn, 1));
}

R1ReplyStream::R1ReplyStream(const Tokenizer& tokenizer) : tokenizer_(tokenizer), tokens_(R1Tokens::of(tokenizer)) {
  decoder_.emplace(tokenizer_);
}

void R1ReplyStream::add(Delta& delta, const std::string& text) const {
  (in_reasoning_ ? delta.reasoning : delta.content) += text;
}

R1ReplyStream::Delta R1ReplyStream::push(TokenId token) {
  Delta delta;
  if (token == tokens_.end_of_sentence) {
    // Not text. Nothing follows it unless the request ignores it (vLLM's ignore_eos): what does is read on, as
    // vLLM's reader reads on past a special token it skips.
    stopped_ = true;
    return delta;
  }
  if (token == tokens_.think && in_reasoning_ && !started_) return delta;  // the model opened the reasoning itself
  started_ = true;
  if (token == tokens_.end_think && in_reasoning_) {
    add(delta, decoder_->finish());
    in_reasoning_ = false;
    decoder_.emplace(tokenizer_);
    return delta;
  }
  add(delta, decoder_->push(token));
  return delta;
}

R1ReplyStream::Delta R1ReplyStream::finish() {
  Delta delta;
  add(delta, decoder_->finish());
  return delta;
}

R1Reply parse_r1_reply(const Tokenizer& tokenizer, std::span<const TokenId> generated) {
  R1ReplyStream stream(tokenizer);
  R1Reply reply;
  auto take = [&](const R1ReplyStream::Delta& d) {
    reply.reasoning += d.reasoning;
    reply.content += d.content;
  };
  for (TokenId t : generated) take(stream.push(t));
  take(stream.finish());
  reply.stopped = stream.stopped();
  return reply;
}

}  // namespace moeserve::chat
