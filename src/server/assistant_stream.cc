#include "server/assistant_stream.h"

#include <fmt/format.h>

#include <random>

#include "util/error.h"

namespace moeserve::server {

namespace {

std::string call_id() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format("call_{:016x}", rng());
}

}  // namespace

AssistantStream::AssistantStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings)
    : tokenizer_(tokenizer),
      stops_(std::move(stop_strings)),
      parser_(tokenizer, harmony::Role::assistant) {
  unparsed_decoder_.emplace(tokenizer_);
}

AssistantStream::AssistantStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings, R1Reply)
    : AssistantStream(tokenizer, std::move(stop_strings)) {
  r1_.emplace(tokenizer);
}

void AssistantStream::add_r1(const chat::R1ReplyStream::Delta& d, AssistantDelta& delta) {
  delta.reasoning += d.reasoning;
  reasoning_ += d.reasoning;
  add_content(d.content, delta);
}

void AssistantStream::add_content(std::string_view text, AssistantDelta& delta) {
  const std::string released = stops_.push(text);
  delta.content += released;
  content_ += released;
}

void AssistantStream::become_raw(AssistantDelta& delta) {
  raw_.emplace(tokenizer_);
  std::string text;
  for (TokenId t : unparsed_) text += raw_->push(t);
  unparsed_.clear();
  add_content(text, delta);
}

bool AssistantStream::stop_string_in_header(TokenId token) {
  // Only the text before a message's content is kept: its header, the one place plain text can hide.
  if (parser_.state() == harmony::StreamingParser::State::content) return false;
  const std::string added = unparsed_decoder_->push(token);
  unparsed_text_ += added;
  if (added.empty() || parser_.state() != harmony::StreamingParser::State::header) return false;
  // Only where the new text can complete a stop string: the search stays linear in the output.
  const size_t reach = added.size() + stops_.longest();
  return stops_.occurs_in(unparsed_text_, unparsed_text_.size() > reach ? unparsed_text_.size() - reach : 0);
}

void AssistantStream::route(const harmony::Message& message, const std::string& text, AssistantDelta& delta) {
  const std::string channel = message.channel.value_or("");
  const std::string recipient = message.recipient.value_or("");
  if (channel == "analysis") {
    delta.reasoning += text;
    reasoning_ += text;
  } else if (recipient.rfind("functions.", 0) == 0) {
    if (!in_tool_call_) {
      in_tool_call_ = true;
      tool_calls_.push_back({call_id(), recipient.substr(std::string("functions.").size()), ""});
      delta.tool_started = true;
    }
    delta.tool_index = tool_calls_.size() - 1;
    delta.tool_arguments += text;
    tool_calls_.back().arguments += text;
  } else if (!text.empty()) {
    add_content(text, delta);
  }
}

AssistantDelta AssistantStream::push(TokenId token) {
  AssistantDelta delta;
  if (r1_) {
    if (r1_->in_reasoning() && !r1_->stopped()) ++reasoning_tokens_;
    add_r1(r1_->push(token), delta);
    return delta;
  }
  if (raw_) {
    add_content(raw_->push(token), delta);
    return delta;
  }
  unparsed_.push_back(token);
  try {
    parser_.process(token);
  } catch (const Error&) {
    // Not Harmony from here on: the tokens of the unfinished message, this one included, become plain content.
    become_raw(delta);
    return delta;
  }
  if (stop_string_in_header(token)) {
    become_raw(delta);
    return delta;
  }
  if (parser_.state() == harmony::StreamingParser::State::content && parser_.current()) {
    if (parser_.current()->channel == "analysis") ++reasoning_tokens_;
    route(*parser_.current(), parser_.last_content_delta(), delta);
  }
  if (parser_.messages().size() > messages_seen_) {
    messages_seen_ = parser_.messages().size();
    in_tool_call_ = false;
    unparsed_.clear();
    unparsed_decoder_.emplace(tokenizer_);
    unparsed_text_.clear();
  }
  return delta;
}

AssistantDelta AssistantStream::finish() {
  AssistantDelta delta;
  if (r1_) {
    add_r1(r1_->finish(), delta);
  } else if (raw_) {
    add_content(raw_->finish(), delta);
  } else if (parser_.state() == harmony::StreamingParser::State::header && !unparsed_.empty()) {
    // Cut off inside a header: show what was generated rather than drop it.
    add_content(unparsed_text_ + unparsed_decoder_->finish(), delta);
  }
  const std::string rest = stops_.flush();
  delta.content += rest;
  content_ += rest;
  return delta;
}

}  // namespace moeserve::server
