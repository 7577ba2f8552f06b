#include "server/http_head_scan.h"

#include <fmt/format.h>

namespace moeserve::server {

namespace {

// RFC 9110 §5.6.2: tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" / "_" / "`" / "|" / "~"
// / DIGIT / ALPHA: a method and a field name are made of these.
bool is_tchar(unsigned char c) {
  if (c >= '0' && c <= '9') return true;
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+': case '-': case '.': case '^':
    case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

// A request-target byte as Beast accepts it: any visible octet, obs-text included (no controls, no space).
bool is_target_char(unsigned char c) { return c > 0x20 && c != 0x7f; }

// RFC 9110 §5.5: field-vchar / SP / HTAB, obs-text included.
bool is_value_char(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

}  // namespace

size_t RequestHeadScan::scan(std::string_view bytes) {
  size_t taken = 0;
  while (taken < bytes.size() && state_ != State::done && state_ != State::invalid) {
    if (!step(static_cast<unsigned char>(bytes[taken]))) break;
    ++taken;
    ++offset_;
  }
  return taken;
}

bool RequestHeadScan::reject(unsigned char c, const char* expected) {
  state_ = State::invalid;
  error_ = fmt::format("not an HTTP/1.1 request: byte 0x{:02x} at offset {} of the request head where {} belongs", c,
                       offset_, expected);
  return false;
}

// A run of `member` bytes closed by `end`, after which the head goes on in `next`.
bool RequestHeadScan::run_until(unsigned char c, unsigned char end, State next, bool (*member)(unsigned char),
                                const char* expected) {
  if (c == end) state_ = next;
  else if (!member(c)) return reject(c, expected);
  return true;
}

bool RequestHeadScan::step(unsigned char c) {
  // Beast takes HTTP/1.0 and HTTP/1.1 only ('b': a binary digit).
  static constexpr std::string_view kVersion = "HTTP/1.b\r";
  switch (state_) {
    case State::method_start:
      if (!is_tchar(c)) return reject(c, "a method (e.g. GET or POST)");
      state_ = State::method;
      return true;
    case State::method:
      return run_until(c, ' ', State::target_start, is_tchar, "the method or the space after it");
    case State::target_start:
      if (!is_target_char(c)) return reject(c, "a request target (e.g. /v1/completions)");
      state_ = State::target;
      version_index_ = 0;
      return true;
    case State::target:
      return run_until(c, ' ', State::version, is_target_char, "the request target or the space after it");
    case State::version: {
      const char want = kVersion[version_index_];
      const bool ok = want == 'b' ? (c == '0' || c == '1') : c == static_cast<unsigned char>(want);
      if (!ok) return reject(c, "the HTTP version (HTTP/1.0 or HTTP/1.1)");
      if (++version_index_ == kVersion.size()) state_ = State::request_line_lf;
      return true;
    }
    case State::request_line_lf:
    case State::value_lf:
    case State::end_lf:
      if (c != '\n') return reject(c, "a line feed after the carriage return");
      state_ = state_ == State::request_line_lf ? State::first_field
               : state_ == State::value_lf      ? State::field_start
                                                : State::done;
      return true;
    case State::first_field:
    case State::field_start:
      if (c == '\r') state_ = State::end_lf;
      else if (is_tchar(c)) state_ = State::name;
      // obs-fold (RFC 9112 §5.2): a field line may continue on the next line after white space, which Beast joins.
      else if (state_ == State::field_start && (c == ' ' || c == '\t')) state_ = State::value;
      else return reject(c, "a header field name or the blank line ending the head");
      return true;
    case State::name:
      return run_until(c, ':', State::value, is_tchar, "the field name or the colon after it");
    case State::value:
      return run_until(c, '\r', State::value_lf, is_value_char, "a field value character");
    case State::done:
    case State::invalid:
      return false;
  }
  return false;
}

}  // namespace moeserve::server
