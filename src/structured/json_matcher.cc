#include "structured/json_matcher.h"

namespace moeserve::structured {
namespace {

enum FrameKind : uint8_t { kRoot, kObject, kKey, kAnyObject, kArray, kString, kNumber, kLiterals };
// The node of a value the schema leaves open (an {} schema, or inside a json_object): any JSON value.
constexpr uint16_t kAnyNode = UINT16_MAX;

// Object phases (schema objects and any-objects).
enum : uint8_t { kOpen, kAfterKey, kAfterColon, kInKey, kInValue, kAfterValue, kAfterComma };
// Number phases.
enum : uint8_t { kStart, kMinus, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits };
constexpr uint32_t kMaxIntDigits = 15, kMaxFracDigits = 15, kMaxExpDigits = 2;
// String phases past 0 (plain): an escape's letter, then UTF-8 continuation bytes still expected.
enum : uint8_t { kPlain, kEscape, kCont1, kCont2, kE0, kED, kCont3, kF0, kF4 };

// What kAnyNode stands for where a frame asks its node: no bounds, items of any value, the three literals.
const SchemaNode& any_node() {
  static const SchemaNode node = [] {
    SchemaNode n;
    n.items = kAnyNode;
    n.literals = {"true", "false", "null"};
    return n;
  }();
  return node;
}

bool is_digit(uint8_t b) { return b >= '0' && b <= '9'; }

}  // namespace

MatcherState JsonMatcher::start() const {
  MatcherState s;
  s.frames[0] = {kRoot, 0, 0, 0};
  s.depth = 1;
  return s;
}

void JsonMatcher::push(MatcherState& s, Frame frame) const {
  if (s.depth == kMaxFrames) {
    s.failed = true;
    return;
  }
  s.frames[s.depth++] = frame;
}

bool JsonMatcher::rest_optional(const SchemaNode& object, uint32_t next) const {
  for (size_t j = next; j < object.required.size(); ++j)
    if (object.required[j]) return false;
  return true;
}

void JsonMatcher::begin_value(MatcherState& s, uint16_t index, uint8_t b) const {
  const NodeKind kind = node(index).kind;
  const uint16_t node = index;
  const bool number_start = b == '-' || is_digit(b);
  switch (kind) {
    case NodeKind::any:
      if (b == '{') return push(s, {kAnyObject, kOpen, kAnyNode, 0});
      if (b == '[') return push(s, {kArray, kOpen, kAnyNode, 0});
      if (b == '"') return push(s, {kString, kPlain, kAnyNode, 0});
      if (number_start) {
        push(s, {kNumber, kStart, kAnyNode, 0});
        return feed_number(s, b);
      }
      push(s, {kLiterals, 0, kAnyNode, 0b111});
      return feed_literals(s, b);
    case NodeKind::object:
      if (b != '{') break;
      return push(s, {kObject, kOpen, node, 0});
    case NodeKind::any_object:
      if (b != '{') break;
      return push(s, {kAnyObject, kOpen, node, 0});
    case NodeKind::array:
      if (b != '[') break;
      return push(s, {kArray, kOpen, node, 0});
    case NodeKind::string:
      if (b != '"') break;
      return push(s, {kString, kPlain, node, 0});
    case NodeKind::number:
    case NodeKind::integer:
      if (!number_start) break;
      push(s, {kNumber, kStart, node, 0});
      return feed_number(s, b);
    case NodeKind::literals: {
      const size_t n = this->node(node).literals.size();
      push(s, {kLiterals, 0, node, n == 32 ? UINT32_MAX : (1u << n) - 1});
      return feed_literals(s, b);
    }
    case NodeKind::choice:
      // Options are told apart by their first byte (json_schema.cc refuses lists where they are not).
      for (uint16_t option : this->node(node).options) {
        MatcherState trial = s;
        begin_value(trial, option, b);
        if (!trial.failed) {
          s = trial;
          return;
        }
      }
      break;
  }
  s.failed = true;
}

void JsonMatcher::value_done(MatcherState& s) const {
  --s.depth;
  Frame& parent = s.frames[s.depth - 1];
  switch (parent.kind) {
    case kRoot: parent.phase = 1; break;
    case kAnyObject: parent.phase = parent.phase == kInKey ? kAfterKey : kAfterValue; break;
    case kArray:
      ++parent.count;
      parent.phase = kAfterValue;
      break;
    default: parent.phase = kAfterValue; break;  // kObject
  }
}

void JsonMatcher::feed(MatcherState& s, uint8_t b) const {
  if (s.failed) return;
  Frame& top = s.frames[s.depth - 1];
  switch (top.kind) {
    case kRoot:
      if (top.phase == 0) return begin_value(s, 0, b);
      s.failed = true;  // nothing after the document
      return;
    case kObject: return feed_object(s, b);
    case kKey: {
      const SchemaNode& object = schema_.nodes[top.node];
      uint32_t next = 0;
      for (size_t j = 0; j < object.key_literals.size(); ++j)
        if ((top.count >> j & 1u) && object.key_literals[j].size() > top.phase &&
            static_cast<uint8_t>(object.key_literals[j][top.phase]) == b)
          next |= 1u << j;
      if (next == 0) {
        s.failed = true;
        return;
      }
      top.count = next;
      ++top.phase;
      for (size_t j = 0; j < object.key_literals.size(); ++j)
        if ((next >> j & 1u) && object.key_literals[j].size() == top.phase) {  // keys are distinct whole strings
          --s.depth;
          Frame& parent = s.frames[s.depth - 1];
          parent.count = static_cast<uint32_t>(j) + 1;
          parent.phase = kAfterKey;
          return;
        }
      return;
    }
    case kAnyObject: return feed_any_object(s, b);
    case kArray: return feed_array(s, b);
    case kString: return feed_string(s, b);
    case kNumber: return feed_number(s, b);
    case kLiterals: return feed_literals(s, b);
  }
  s.failed = true;
}

void JsonMatcher::feed_object(MatcherState& s, uint8_t b) const {
  Frame& f = s.frames[s.depth - 1];
  const SchemaNode& object = schema_.nodes[f.node];
  const auto properties = static_cast<uint32_t>(object.key_literals.size());
  switch (f.phase) {
    case kOpen:
    case kAfterComma:
      if (b == '}' && f.phase == kOpen && rest_optional(object, f.count)) return value_done(s);
      if (b == '"') {
        // The next key: any property from f.count on that only optional ones precede.
        uint32_t candidates = 0;
        for (uint32_t j = f.count; j < properties; ++j) {
          candidates |= 1u << j;
          if (object.required[j]) break;
        }
        if (candidates != 0) return push(s, {kKey, 1, f.node, candidates});
      }
      break;
    case kAfterKey:
      if (b != ':') break;
      f.phase = kAfterColon;
      return;
    case kAfterColon:
      f.phase = kInValue;
      return begin_value(s, object.property_nodes[f.count - 1], b);
    case kAfterValue:
      if (b == ',' && f.count < properties) {
        f.phase = kAfterComma;
        return;
      }
      if (b == '}' && rest_optional(object, f.count)) return value_done(s);
      break;
  }
  s.failed = true;
}

void JsonMatcher::feed_any_object(MatcherState& s, uint8_t b) const {
  Frame& f = s.frames[s.depth - 1];
  switch (f.phase) {
    case kOpen:
    case kAfterComma:
      if (b == '}' && f.phase == kOpen) return value_done(s);
      if (b != '"') break;
      f.phase = kInKey;
      return push(s, {kString, kPlain, kAnyNode, 0});
    case kAfterKey:
      if (b != ':') break;
      f.phase = kAfterColon;
      return;
    case kAfterColon:
      f.phase = kInValue;
      return begin_value(s, kAnyNode, b);
    case kAfterValue:
      if (b == ',') {
        f.phase = kAfterComma;
        return;
      }
      if (b == '}') return value_done(s);
      break;
  }
  s.failed = true;
}

const SchemaNode& JsonMatcher::node(uint16_t index) const {
  return index == kAnyNode ? any_node() : schema_.nodes[index];
}

void JsonMatcher::feed_array(MatcherState& s, uint8_t b) const {
  Frame& f = s.frames[s.depth - 1];
  const uint32_t min_items = node(f.node).min_items, max_items = node(f.node).max_items;
  const uint16_t items = node(f.node).items;
  switch (f.phase) {
    case kOpen:
      if (b == ']' && min_items == 0) return value_done(s);
      if (max_items == 0) break;
      f.phase = kInValue;
      return begin_value(s, items, b);
    case kAfterComma:
      f.phase = kInValue;
      return begin_value(s, items, b);
    case kAfterValue:
      if (b == ',' && f.count < max_items) {
        f.phase = kAfterComma;
        return;
      }
      if (b == ']' && f.count >= min_items) return value_done(s);
      break;
  }
  s.failed = true;
}

void JsonMatcher::feed_string(MatcherState& s, uint8_t b) const {
  Frame& f = s.frames[s.depth - 1];
  const uint32_t min_length = node(f.node).min_length, max_length = node(f.node).max_length;
  auto one_more = [&](uint8_t next_phase) {
    if (f.count >= max_length) {
      s.failed = true;
      return;
    }
    f.phase = next_phase;
    if (next_phase == kPlain) ++f.count;
  };
  auto continuation = [&](uint8_t lo, uint8_t hi, uint8_t next_phase) {
    if (b < lo || b > hi) {
      s.failed = true;
      return;
    }
    f.phase = next_phase;
    if (next_phase == kPlain) ++f.count;  // the character's last byte
  };
  switch (f.phase) {
    case kPlain:
      if (b == '"') {
        if (f.count < min_length) break;
        return value_done(s);
      }
      if (b == '\\') return one_more(kEscape);
      if (b < 0x20) break;
      if (b < 0x80) return one_more(kPlain);
      if (b >= 0xc2 && b <= 0xdf) return one_more(kCont1);
      if (b == 0xe0) return one_more(kE0);
      if (b == 0xed) return one_more(kED);
      if (b >= 0xe1 && b <= 0xef) return one_more(kCont2);
      if (b == 0xf0) return one_more(kF0);
      if (b >= 0xf1 && b <= 0xf3) return one_more(kCont3);
      if (b == 0xf4) return one_more(kF4);
      break;
    case kEscape:  // no \u: a document is written without it
      if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' || b == 't') {
        f.phase = kPlain;
        ++f.count;
        return;
      }
      break;
    case kCont1: return continuation(0x80, 0xbf, kPlain);
    case kCont2: return continuation(0x80, 0xbf, kCont1);
    case kE0: return continuation(0xa0, 0xbf, kCont1);
    case kED: return continuation(0x80, 0x9f, kCont1);
    case kCont3: return continuation(0x80, 0xbf, kCont2);
    case kF0: return continuation(0x90, 0xbf, kCont2);
    case kF4: return continuation(0x80, 0x8f, kCont2);
  }
  s.failed = true;
}

void JsonMatcher::feed_number(MatcherState& s, uint8_t b) const {
  Frame& f = s.frames[s.depth - 1];
  const bool integer = node(f.node).kind == NodeKind::integer;
  auto digit_into = [&](uint8_t phase, uint32_t cap) {
    if (f.phase != phase) f.count = 0;
    if (f.count >= cap) {
      s.failed = true;
      return;
    }
    f.phase = phase;
    ++f.count;
  };
  switch (f.phase) {
    case kStart:
      if (b == '-') {
        f.phase = kMinus;
        return;
      }
      [[fallthrough]];
    case kMinus:
      if (b == '0') {
        f.phase = kZero;
        return;
      }
      if (b >= '1' && b <= '9') return digit_into(kInt, kMaxIntDigits);
      break;
    case kZero:
    case kInt:
      if (is_digit(b)) {
        if (f.phase == kZero) break;  // no leading zeros
        return digit_into(kInt, kMaxIntDigits);
      }
      if (!integer && b == '.') {
        f.phase = kDot;
        return;
      }
      if (!integer && (b == 'e' || b == 'E')) {
        f.phase = kExp;
        return;
      }
      value_done(s);  // the byte belongs to what follows the number
      return feed(s, b);
    case kDot:
      if (is_digit(b)) return digit_into(kFrac, kMaxFracDigits);
      break;
    case kFrac:
      if (is_digit(b)) return digit_into(kFrac, kMaxFracDigits);
      if (b == 'e' || b == 'E') {
        f.phase = kExp;
        return;
      }
      value_done(s);
      return feed(s, b);
    case kExp:
      if (b == '+' || b == '-') {
        f.phase = kExpSign;
        return;
      }
      [[fallthrough]];
    case kExpSign:
      if (is_digit(b)) return digit_into(kExpDigits, kMaxExpDigits);
      break;
    case kExpDigits:
      if (is_digit(b)) return digit_into(kExpDigits, kMaxExpDigits);
      value_done(s);
      return feed(s, b);
  }
  s.failed = true;
}

void JsonMatcher::feed_literals(MatcherState& s, uint8_t b) const {
  Frame& f = s.frames[s.depth - 1];
  const auto& texts = node(f.node).literals;
  uint32_t next = 0;
  bool complete_here = false, all_complete_after = true;
  for (size_t j = 0; j < texts.size(); ++j) {
    if (!(f.count >> j & 1u)) continue;
    if (texts[j].size() == f.phase) complete_here = true;
    if (texts[j].size() > f.phase && static_cast<uint8_t>(texts[j][f.phase]) == b) {
      next |= 1u << j;
      all_complete_after = all_complete_after && texts[j].size() == static_cast<size_t>(f.phase) + 1;
    }
  }
  if (next == 0) {
    if (!complete_here) {
      s.failed = true;
      return;
    }
    value_done(s);  // a literal that other candidates extended (1 beside 12) ends before this byte
    return feed(s, b);
  }
  f.count = next;
  ++f.phase;
  if (all_complete_after) value_done(s);
}

bool JsonMatcher::complete(const MatcherState& state) const {
  if (state.failed) return false;
  MatcherState s = state;
  for (;;) {
    const Frame& top = s.frames[s.depth - 1];
    if (top.kind == kRoot) return top.phase == 1;
    if (top.kind == kNumber && (top.phase == kZero || top.phase == kInt || top.phase == kFrac || top.phase == kExpDigits)) {
      value_done(s);
      continue;
    }
    if (top.kind == kLiterals) {
      const auto& texts = node(top.node).literals;
      bool done = false;
      for (size_t j = 0; j < texts.size(); ++j) done = done || ((top.count >> j & 1u) && texts[j].size() == top.phase);
      if (!done) return false;
      value_done(s);
      continue;
    }
    return false;
  }
}

int64_t JsonMatcher::plain_string_room(const MatcherState& s) const {
  if (s.failed) return -1;
  const Frame& top = s.frames[s.depth - 1];
  if (top.kind != kString || top.phase != kPlain) return -1;
  const uint32_t max_length = node(top.node).max_length;
  return max_length == UINT32_MAX ? INT64_MAX : static_cast<int64_t>(max_length) - top.count;
}

}  // namespace moeserve::structured
