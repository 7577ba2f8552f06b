// Decides, byte by byte as they arrive, whether what a client has sent so far can still begin an HTTP/1.x request
// head (RFC 9112 §3 request-line, §5 field lines), so that bytes that never can (binary junk, a TLS handshake on
// the plain-text port, a request line followed by noise) are answered 400 at once. Beast's parser alone waits for
// the blank line that ends a head before it looks at a second read's bytes, so junk trickled in after a plausible
// start would wait for the request timeout. The check accepts everything Beast's parser accepts there (the same
// character classes; obs-fold continuation lines); the parser stays the judge of a complete head.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace moeserve::server {

class RequestHeadScan {
 public:
  // Examines bytes that follow those examined before and returns how many it took: all of them, or fewer when the
  // head ended (the blank line was seen) or a byte no request head can have there was found.
  size_t scan(std::string_view bytes);
  bool done() const { return state_ == State::done; }
  bool invalid() const { return state_ == State::invalid; }
  // Bytes of the head examined: its size once done().
  size_t examined() const { return offset_; }
  // What was wrong, naming the byte and its offset in the head; empty unless invalid().
  const std::string& error() const { return error_; }

 private:
  enum class State {
    method_start, method, target_start, target, version, request_line_lf, first_field, field_start, name, value,
    value_lf, end_lf, done, invalid
  };
  bool step(unsigned char c);
  bool run_until(unsigned char c, unsigned char end, State next, bool (*member)(unsigned char), const char* expected);
  bool reject(unsigned char c, const char* expected);  // false, after recording the error

  State state_ = State::method_start;
  size_t version_index_ = 0;  // the position in "HTTP/1.b\r" while in State::version
  size_t offset_ = 0;         // bytes of the head examined
  std::string error_;
};

}  // namespace moeserve::server
