// The streaming Harmony parser (openai/harmony src/encoding.rs @ec7606d, StreamableParser): token ids in,
// messages out, as they arrive. States: expect <|start|> -> header tokens until <|message|> -> content until a
// stop token (<|end|>, <|return|> or <|call|>), which completes the message. Started with a role (as after a
// prompt that ends "<|start|>assistant") it begins in the header. The header is parsed from its text:
// <|channel|>X sets the channel, "to=X" the recipient, a last word the content type, and without a given role
// the first word is the role, or the tool's name when it is not a role.
//
// Malformed input is an Error naming the token and its position: a token other than <|start|> between messages,
// the end of the stream inside a header, a header with words left over. With strict = false a stop token inside
// a header ends a message whose header lacked <|message|> (the header text becomes its content), as harmony's
// non-strict mode does. Content streams through IncrementalDecoder: no delta splits a character, bytes that
// cannot form one become U+FFFD, and an id outside the vocabulary becomes U+FFFD.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harmony/message.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"

namespace moeserve::harmony {

struct ParseOptions {
  bool strict = true;
};

class StreamingParser {
 public:
  enum class State { expect_start, header, content };

  StreamingParser(const Tokenizer& tokenizer, std::optional<Role> role, ParseOptions options = {});

  void process(TokenId token);
  // The end of the stream: completes a message whose content was not closed by a stop token.
  void process_eos();

  State state() const { return state_; }
  const std::vector<Message>& messages() const { return messages_; }
  // The message being read: header fields once <|message|> has arrived, and its content so far.
  const std::optional<Message>& current() const { return current_; }
  // The content text the last token added to the current message (empty when it completed no character).
  const std::string& last_content_delta() const { return last_delta_; }
  size_t tokens_processed() const { return position_; }

 private:
  void begin_content();
  void end_message();
  void end_headerless_message();

  const Tokenizer& tokenizer_;
  ParseOptions options_;
  std::optional<Role> next_role_;
  State state_;
  std::vector<TokenId> header_tokens_;
  std::optional<Message> current_;
  IncrementalDecoder decoder_;
  std::string last_delta_;
  std::vector<Message> messages_;
  size_t position_ = 0;
};

// Harmony's header parsing, exposed for tests. parse_recipient_and_type = false leaves every word after the
// role as content (the non-strict recovery); otherwise words left over are an error.
struct ParsedHeader {
  Message message;  // role, name, recipient, channel, content type; no content
  std::optional<std::string> remaining;
};
ParsedHeader parse_header(std::string header, std::optional<Role> role, bool parse_recipient_and_type);

}  // namespace moeserve::harmony
