// The JSON schemas that constrained decoding accepts, compiled into a flat tree of nodes that the character-level
// matcher (json_matcher.h) walks. The subset is what OpenAI's strict structured outputs allow, read so that every
// output the matcher lets through validates against the schema:
//   type (one, or a list such as ["string", "null"]; a list may not hold both number and integer), object with
//   properties (emitted in the order of their names, as the request's parsed JSON holds them; those not in
//   `required` may be left out) and additionalProperties
//   false (or absent: strict mode), array with items / minItems / maxItems, string with minLength / maxLength
//   (characters), integer, number, boolean, null, enum, const, and {} (any JSON value).
// The output is compact JSON: no whitespace outside strings, no \u escapes, integers of at most 15 digits, numbers
// of at most 15 integer and 15 fraction digits and a 2-digit exponent. Anything else in a schema (pattern,
// anyOf, $ref, minimum, format, ...) is refused naming the keyword, rather than ignored.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace moeserve::structured {

enum class NodeKind : uint8_t { any, object, any_object, array, string, number, integer, literals, choice };

struct SchemaNode {
  NodeKind kind = NodeKind::any;
  // object: properties in order; key_literals[i] is property i's key as JSON text (quotes included).
  std::vector<std::string> key_literals;
  std::vector<uint16_t> property_nodes;
  std::vector<bool> required;
  // array
  uint16_t items = 0;
  uint32_t min_items = 0, max_items = UINT32_MAX;
  // string
  uint32_t min_length = 0, max_length = UINT32_MAX;
  // literals (enum, const, true / false / null): compact JSON texts, at most 32
  std::vector<std::string> literals;
  // choice (a list of types): one child per type, told apart by the first character
  std::vector<uint16_t> options;
};

struct JsonSchema {
  std::vector<SchemaNode> nodes;  // nodes[0] is the root
};

// Throws moeserve::Error naming the schema path and keyword that is not supported.
JsonSchema compile_json_schema(const nlohmann::json& schema);
// json_object: any JSON object.
JsonSchema any_json_object();

}  // namespace moeserve::structured
