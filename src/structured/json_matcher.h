// A character-level (byte-level) recogniser of the JSON a schema allows (json_schema.h): fed one byte at a time,
// it says whether the bytes so far are a prefix of an allowed document, and whether they are a whole one. Its
// state is a small fixed-size value (a stack of frames), so the token mask (token_mask.h) copies it freely to
// try a token's bytes. Strings are checked as UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF)
// and their length counted in characters; control characters must be escaped.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "structured/json_schema.h"

namespace moeserve::structured {

inline constexpr int kMaxFrames = 24;  // nesting of values, keys and literals together

struct Frame {
  uint8_t kind = 0;    // FrameKind (json_matcher.cc)
  uint8_t phase = 0;   // where in the value it is
  uint16_t node = 0;   // the schema node
  uint32_t count = 0;  // characters, items, the next property, or literal candidates (a bit each)
  bool operator==(const Frame&) const = default;
};

struct MatcherState {
  std::array<Frame, kMaxFrames> frames{};
  uint8_t depth = 0;
  bool failed = false;
  bool operator==(const MatcherState&) const = default;
};

class JsonMatcher {
 public:
  explicit JsonMatcher(const JsonSchema& schema) : schema_(schema) {}

  MatcherState start() const;
  // Feeds one byte; a failed state stays failed.
  void feed(MatcherState& state, uint8_t byte) const;
  bool feed(MatcherState& state, std::string_view bytes) const {
    for (char c : bytes) {
      feed(state, static_cast<uint8_t>(c));
      if (state.failed) return false;
    }
    return true;
  }
  // The bytes so far are a whole document.
  bool complete(const MatcherState& state) const;
  // Top frame is inside a string with nothing pending: how many more characters it may take (UINT32_MAX: any);
  // -1 when the state is not there. The mask's fast path for tokens of plain string characters.
  int64_t plain_string_room(const MatcherState& state) const;

  const JsonSchema& schema() const { return schema_; }

 private:
  // Schema node `index`, or the open one that "any value" frames stand for.
  const SchemaNode& node(uint16_t index) const;
  // Starts a value of node `index` with its first byte.
  void begin_value(MatcherState& s, uint16_t index, uint8_t byte) const;
  void push(MatcherState& s, Frame frame) const;
  // The top frame is a finished value: pops it and tells its parent.
  void value_done(MatcherState& s) const;
  void feed_object(MatcherState& s, uint8_t byte) const;
  void feed_any_object(MatcherState& s, uint8_t byte) const;
  void feed_array(MatcherState& s, uint8_t byte) const;
  void feed_string(MatcherState& s, uint8_t byte) const;
  void feed_number(MatcherState& s, uint8_t byte) const;
  void feed_literals(MatcherState& s, uint8_t byte) const;
  // Whether an object's properties from `next` on may all be left out.
  bool rest_optional(const SchemaNode& object, uint32_t next) const;

  const JsonSchema& schema_;
};

}  // namespace moeserve::structured
