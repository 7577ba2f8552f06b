// DeepSeek-R1's chat format (the chat template of deepseek-ai/DeepSeek-R1's tokenizer_config.json, current
// version): rendering a conversation for the model, and reading a reply back as reasoning and content.
//
//   <｜begin▁of▁sentence｜>{system prompts, joined by "\n\n"}
//   <｜User｜>{user content}                       per user turn, no newline between turns
//   <｜Assistant｜>{content after its last </think>}<｜end▁of▁sentence｜>   per earlier assistant turn
//   <｜Assistant｜><think>\n                         the generation prompt: the reply starts inside the reasoning
//
// The template's text is tokenised as transformers' apply_chat_template does: added tokens (<｜User｜>, BOS...) are
// recognised wherever they occur, also inside message content (MLPerf feeds prompts this way). A reply is the
// reasoning up to </think>, then the content; without </think> it is all reasoning (vLLM's deepseek_r1 parser).
// Tool calls are not rendered: the R1 template's tool format is not supported.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"

namespace moeserve::chat {

struct ChatTurn {
  enum class Role { system, user, assistant };
  Role role = Role::user;
  std::string content;
};

// The ids of the format's tokens in a DeepSeek tokenizer; fails naming the one it lacks.
struct R1Tokens {
  TokenId begin_of_sentence;
  TokenId end_of_sentence;
  TokenId think;      // <think>
  TokenId end_think;  // </think>
  static R1Tokens of(const Tokenizer& tokenizer);
};

// The template's text for the turns; with add_generation_prompt it ends "<｜Assistant｜><think>\n".
std::string render_r1_text(std::span<const ChatTurn> turns, bool add_generation_prompt);
// Its token ids (added tokens recognised anywhere, as apply_chat_template tokenises).
std::vector<TokenId> render_r1_prompt(const Tokenizer& tokenizer, std::span<const ChatTurn> turns,
                                      bool add_generation_prompt = true);
// One user message, as MLPerf's DeepSeek-R1 harness sends each sample.
std::vector<TokenId> render_r1_user_prompt(const Tokenizer& tokenizer, const std::string& user);

struct R1Reply {
  std::string reasoning;  // up to </think> (a leading <think> dropped)
  std::string content;    // after </think>
  bool stopped = false;   // <｜end▁of▁sentence｜> came (else cut short); under ignore_eos more may follow it
};
// Reads ids generated after a prompt that ends with the generation prompt.
R1Reply parse_r1_reply(const Tokenizer& tokenizer, std::span<const TokenId> generated);

// Streaming: tokens in, reasoning and content text out as they become whole characters. The end of sentence and
// the think tokens are not text.
class R1ReplyStream {
 public:
  explicit R1ReplyStream(const Tokenizer& tokenizer);
  struct Delta {
    std::string reasoning;
    std::string content;
  };
  Delta push(TokenId token);
  Delta finish();
  bool in_reasoning() const { return in_reasoning_; }
  bool stopped() const { return stopped_; }

 private:
  void add(Delta& delta, const std::string& text) const;

  const Tokenizer& tokenizer_;
  R1Tokens tokens_;
  std::optional<IncrementalDecoder> decoder_;  // of the part being read (reasoning, then content)
  bool in_reasoning_ = true;
  bool started_ = false;  // a token other than a leading <think> was seen
  bool stopped_ = false;
};

}  // namespace moeserve::chat
