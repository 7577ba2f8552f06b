#include "harmony/parser.h"

#include "harmony/tool_schema.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace moeserve::harmony {
namespace {

bool is_stop_token(TokenId token) {
  return token == o200k::kEnd || token == o200k::kReturn || token == o200k::kCall;
}

bool is_ascii_whitespace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

// Unicode White_Space at the start of text: its length in bytes, or 0.
size_t whitespace_length(std::string_view text) {
  if (text.empty()) return 0;
  if (is_ascii_whitespace(text[0]) || text[0] == '\v') return 1;
  for (std::string_view space : {"\u0085", "\u00A0", "\u1680", "\u2000", "\u2001", "\u2002", "\u2003", "\u2004",
                                 "\u2005", "\u2006", "\u2007", "\u2008", "\u2009", "\u200A", "\u2028", "\u2029",
                                 "\u202F", "\u205F", "\u3000"}) {
    if (text.starts_with(space)) return space.size();
  }
  return 0;
}

std::string trim(std::string_view text) {
  while (size_t n = whitespace_length(text)) text.remove_prefix(n);
  // Trailing: step back over whole characters.
  while (!text.empty()) {
    size_t start = text.size() - 1;
    while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
    if (whitespace_length(text.substr(start)) != text.size() - start) break;
    text.remove_suffix(text.size() - start);
  }
  return std::string(text);
}

std::vector<std::string> split_ascii_whitespace(const std::string& text) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_ascii_whitespace(text[i])) ++i;
    const size_t start = i;
    while (i < text.size() && !is_ascii_whitespace(text[i])) ++i;
    if (i > start) parts.push_back(text.substr(start, i - start));
  }
  return parts;
}

std::string strip_to(const std::string& part) { return part.starts_with("to=") ? part.substr(3) : part; }

}  // namespace

ParsedHeader parse_header(std::string header, std::optional<Role> role, bool parse_recipient_and_type) {
  constexpr std::string_view kChannel = "<|channel|>", kConstrain = "<|constrain|>";
  ParsedHeader parsed;
  Message& m = parsed.message;
  if (const size_t at = header.find(kChannel); at != std::string::npos) {
    const std::string_view after = std::string_view(header).substr(at + kChannel.size());
    size_t end = 0;
    while (end < after.size() && after[end] != '<' && whitespace_length(after.substr(end)) == 0) ++end;
    MOESERVE_CHECK(end > 0, "harmony: the header \"{}\" has <|channel|> but no channel name", header);
    m.channel = std::string(after.substr(0, end));
    header = header.substr(0, at) + std::string(after.substr(end));
  }
  header = trim(header);
  // "to=functions.f<|constrain|>json": the constraint is the content type even without a space before it.
  if (header.find(kConstrain) != std::string::npos) {
    std::string spaced;
    for (size_t at = 0;;) {
      const size_t next = header.find(kConstrain, at);
      spaced += header.substr(at, next - at);
      if (next == std::string::npos) break;
      spaced += " ";
      spaced += kConstrain;
      at = next + kConstrain.size();
    }
    header = trim(spaced);
  }
  std::vector<std::string> parts = split_ascii_whitespace(header);
  std::optional<std::string> role_word;
  if (role) {
    m.role = *role;
  } else {
    MOESERVE_CHECK(!parts.empty(), "harmony: the message header has no role");
    role_word = parts.front();
    if (const auto r = role_from_name(parts.front())) {
      m.role = *r;
    } else {
      // An author that is not a role is a tool ("browser.search to=assistant"), if anything follows it.
      MOESERVE_CHECK(parts.size() > 1 || parts.front().starts_with("to="), "harmony: unknown role \"{}\"",
                     parts.front());
      parts.erase(parts.begin());
      m.role = Role::tool;
    }
  }
  if (!parts.empty() && parts.front() == role_name(m.role)) parts.erase(parts.begin());
  if (parse_recipient_and_type && !parts.empty()) {
    const size_t count = parts.size();
    const std::string last = parts.back();
    parts.pop_back();
    if (last.starts_with("to=") || count == 1) {
      m.recipient = strip_to(last);
    } else {
      m.content_type = last;
      m.recipient = strip_to(parts.back());
      parts.pop_back();
    }
  }
  if (!parts.empty()) parsed.remaining = join(parts, " ");
  if (m.role == Role::tool) m.name = role_word;
  return parsed;
}

StreamingParser::StreamingParser(const Tokenizer& tokenizer, std::optional<Role> role, ParseOptions options)
    : tokenizer_(tokenizer),
      options_(options),
      next_role_(role),
      state_(role ? State::header : State::expect_start),
      decoder_(tokenizer) {}

void StreamingParser::process(TokenId token) {
  const size_t position = position_++;
  last_delta_.clear();
  switch (state_) {
    case State::expect_start:
      MOESERVE_CHECK(token == o200k::kStart, "harmony: expected <|start|> ({}) at token {}, got {}", o200k::kStart,
                     position, token);
      state_ = State::header;
      header_tokens_.clear();
      return;
    case State::header:
      if (token == o200k::kMessage) {
        begin_content();
      } else if (!options_.strict && is_stop_token(token)) {
        end_headerless_message();
      } else {
        header_tokens_.push_back(token);
      }
      return;
    case State::content:
      if (is_stop_token(token)) {
        end_message();
        return;
      }
      if (token < 0 || token > o200k::kLastSpecial) {
        last_delta_ = decoder_.finish() + std::string(kReplacementCharacter);
      } else {
        last_delta_ = decoder_.push(token);
      }
      std::get<std::string>(current_->content) += last_delta_;
      return;
  }
}

void StreamingParser::process_eos() {
  last_delta_.clear();
  switch (state_) {
    case State::expect_start: return;  // the stream may end after a stop token
    case State::header:
      fail("harmony: the stream ended inside a message header (token {}): <|message|> never came", position_);
    case State::content: end_message(); return;
  }
}

void StreamingParser::begin_content() {
  std::string header;
  try {
    header = tokenizer_.decode_utf8(header_tokens_);
  } catch (const Error& e) {
    fail("harmony: the message header ending at token {} does not decode: {}", position_ - 1, e.what());
  }
  ParsedHeader parsed = parse_header(header, next_role_, true);
  MOESERVE_CHECK(!parsed.remaining.has_value(),
                 "harmony: unexpected tokens remaining in message header \"{}\" (ending at token {}): \"{}\"", header,
                 position_ - 1, *parsed.remaining);
  next_role_.reset();
  current_ = std::move(parsed.message);
  current_->content = std::string();
  state_ = State::content;
}

void StreamingParser::end_message() {
  std::string& content = std::get<std::string>(current_->content);
  content += decoder_.finish();
  messages_.push_back(std::move(*current_));
  current_.reset();
  state_ = State::expect_start;
}

void StreamingParser::end_headerless_message() {
  if (next_role_ && !header_tokens_.empty()) {
    ParsedHeader parsed = parse_header(tokenizer_.decode(header_tokens_), next_role_, false);
    parsed.message.content = parsed.remaining.value_or("");
    messages_.push_back(std::move(parsed.message));
  }
  next_role_.reset();
  state_ = State::expect_start;
}

}  // namespace moeserve::harmony
