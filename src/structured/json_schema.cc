#include "structured/json_schema.h"

#include <set>

#include "util/error.h"

namespace moeserve::structured {

using nlohmann::json;

namespace {

constexpr size_t kMaxNodes = 4096;
constexpr size_t kMaxLiterals = 32;
constexpr int kMaxSchemaDepth = 16;
constexpr size_t kMaxLiteralBytes = 255;  // the matcher's position in a literal is a byte

// Keywords that only document a schema.
const std::set<std::string> kAnnotations = {"title", "description", "$schema", "$id", "examples", "default",
                                            "$comment"};

class Compiler {
 public:
  JsonSchema schema;

  uint16_t add(const json& s, const std::string& path, int depth) {
    MOESERVE_CHECK(depth <= kMaxSchemaDepth, "schema at {} nests deeper than {} levels", path, kMaxSchemaDepth);
    MOESERVE_CHECK(s.is_object() || s.is_boolean(), "schema at {} must be an object", path);
    MOESERVE_CHECK(schema.nodes.size() < kMaxNodes, "schema has more than {} nodes", kMaxNodes);
    const auto index = static_cast<uint16_t>(schema.nodes.size());
    schema.nodes.emplace_back();
    if (s.is_boolean()) {
      MOESERVE_CHECK(s.get<bool>(), "schema at {} is false: nothing can match it", path);
      return index;
    }
    SchemaNode node = build(s, path, depth);
    schema.nodes[index] = std::move(node);
    return index;
  }

 private:
  SchemaNode build(const json& s, const std::string& path, int depth) {
    for (const auto& [key, value] : s.items())
      MOESERVE_CHECK(kAnnotations.contains(key) || key == "type" || key == "properties" || key == "required" ||
                         key == "additionalProperties" || key == "items" || key == "minItems" ||
                         key == "maxItems" || key == "minLength" || key == "maxLength" || key == "enum" ||
                         key == "const",
                     "schema keyword '{}' at {} is not supported by constrained decoding", key, path);
    SchemaNode node;
    if (s.contains("enum") || s.contains("const")) {
      node.kind = NodeKind::literals;
      const json values = s.contains("const") ? json::array({s["const"]}) : s["enum"];
      MOESERVE_CHECK(values.is_array() && !values.empty() && values.size() <= kMaxLiterals,
                     "enum at {} must list 1 to {} values", path, kMaxLiterals);
      for (const json& v : values) {
        node.literals.push_back(v.dump());
        MOESERVE_CHECK(node.literals.back().size() <= kMaxLiteralBytes, "an enum value at {} is over {} bytes", path,
                       kMaxLiteralBytes);
      }
      return node;
    }
    if (!s.contains("type")) {
      MOESERVE_CHECK(!s.contains("properties") && !s.contains("items"), "schema at {} needs a type", path);
      return node;  // any value
    }
    const json& type = s["type"];
    if (type.is_array()) {
      MOESERVE_CHECK(!type.empty(), "type at {} is an empty list", path);
      std::set<std::string> seen;
      node.kind = NodeKind::choice;
      for (const json& t : type) {
        MOESERVE_CHECK(t.is_string() && seen.insert(t.get<std::string>()).second, "type at {} must list distinct names",
                       path);
        json single = s;
        single["type"] = t;
        node.options.push_back(add(single, path, depth + 1));
      }
      MOESERVE_CHECK(!(seen.contains("number") && seen.contains("integer")),
                     "type at {} lists both number and integer", path);
      return node;
    }
    MOESERVE_CHECK(type.is_string(), "type at {} must be a string or a list of strings", path);
    const std::string t = type.get<std::string>();
    auto count = [&](const char* key, uint32_t fallback) {
      if (!s.contains(key)) return fallback;
      MOESERVE_CHECK(s[key].is_number_integer() && s[key].get<int64_t>() >= 0 && s[key].get<int64_t>() < UINT32_MAX,
                     "{} at {} must be a non-negative integer", key, path);
      return static_cast<uint32_t>(s[key].get<int64_t>());
    };
    if (t == "object") {
      if (!s.contains("properties") && s.value("additionalProperties", json(true)) != json(false)) {
        node.kind = NodeKind::any_object;
        return node;
      }
      MOESERVE_CHECK(!s.contains("additionalProperties") || s["additionalProperties"] == json(false),
                     "additionalProperties at {} must be false (strict structured outputs)", path);
      node.kind = NodeKind::object;
      std::set<std::string> required;
      for (const json& r : s.value("required", json::array())) {
        MOESERVE_CHECK(r.is_string(), "required at {} must list property names", path);
        required.insert(r.get<std::string>());
      }
      const json properties = s.value("properties", json::object());
      MOESERVE_CHECK(properties.is_object(), "properties at {} must be an object", path);
      for (const auto& [name, sub] : properties.items()) {
        node.key_literals.push_back(json(name).dump());
        MOESERVE_CHECK(node.key_literals.back().size() <= kMaxLiteralBytes, "a property name at {} is over {} bytes",
                       path, kMaxLiteralBytes);
        node.required.push_back(required.erase(name) > 0);
        node.property_nodes.push_back(add(sub, path + ".properties." + name, depth + 1));
      }
      MOESERVE_CHECK(required.empty(), "required at {} names '{}', which is not a property", path, *required.begin());
      MOESERVE_CHECK(node.key_literals.size() <= 32, "object at {} has more than 32 properties", path);
      return node;
    }
    if (t == "array") {
      node.kind = NodeKind::array;
      node.items = add(s.value("items", json::object()), path + ".items", depth + 1);
      node.min_items = count("minItems", 0);
      node.max_items = count("maxItems", UINT32_MAX);
      MOESERVE_CHECK(node.min_items <= node.max_items, "minItems above maxItems at {}", path);
      return node;
    }
    if (t == "string") {
      node.kind = NodeKind::string;
      node.min_length = count("minLength", 0);
      node.max_length = count("maxLength", UINT32_MAX);
      MOESERVE_CHECK(node.min_length <= node.max_length, "minLength above maxLength at {}", path);
      return node;
    }
    if (t == "number" || t == "integer") {
      node.kind = t == "number" ? NodeKind::number : NodeKind::integer;
      return node;
    }
    node.kind = NodeKind::literals;
    if (t == "boolean") node.literals = {"true", "false"};
    else if (t == "null") node.literals = {"null"};
    else fail("type '{}' at {} is not a JSON schema type", t, path);
    return node;
  }
};

}  // namespace

JsonSchema compile_json_schema(const json& schema) {
  Compiler c;
  c.add(schema, "$", 0);
  return std::move(c.schema);
}

JsonSchema any_json_object() {
  JsonSchema s;
  s.nodes.resize(1);
  s.nodes[0].kind = NodeKind::any_object;
  return s;
}

}  // namespace moeserve::structured
