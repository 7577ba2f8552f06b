#include "structured/schema_testing.h"

namespace moeserve::testing {

using nlohmann::json;

namespace {

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xc0) != 0x80;
  return n;
}

bool has_type(const json& value, const std::string& type) {
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "string") return value.is_string();
  if (type == "integer") return value.is_number_integer();
  if (type == "number") return value.is_number();
  if (type == "boolean") return value.is_boolean();
  if (type == "null") return value.is_null();
  return false;
}

int pick(std::mt19937& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

}  // namespace

bool validates(const json& value, const json& schema) {
  if (schema.contains("const") && value != schema["const"]) return false;
  if (schema.contains("enum")) {
    bool found = false;
    for (const json& v : schema["enum"]) found = found || v == value;
    if (!found) return false;
  }
  if (schema.contains("type")) {
    const json types = schema["type"].is_array() ? schema["type"] : json::array({schema["type"]});
    bool any = false;
    for (const json& t : types) any = any || has_type(value, t.get<std::string>());
    if (!any) return false;
  }
  if (value.is_object()) {
    const json properties = schema.value("properties", json::object());
    for (const json& name : schema.value("required", json::array()))
      if (!value.contains(name.get<std::string>())) return false;
    for (const auto& [key, v] : value.items()) {
      if (properties.contains(key)) {
        if (!validates(v, properties[key])) return false;
      } else if (schema.value("additionalProperties", json(true)) == json(false)) {
        return false;
      }
    }
  }
  if (value.is_array()) {
    if (value.size() < schema.value("minItems", 0u) || value.size() > schema.value("maxItems", SIZE_MAX)) return false;
    if (schema.contains("items"))
      for (const json& item : value)
        if (!validates(item, schema["items"])) return false;
  }
  if (value.is_string()) {
    const size_t n = code_points(value.get<std::string>());
    if (n < schema.value("minLength", 0u) || n > schema.value("maxLength", SIZE_MAX)) return false;
  }
  return true;
}

json random_schema(std::mt19937& rng, int depth) {
  const int kind = pick(rng, 0, depth >= 2 ? 6 : 8);
  switch (kind) {
    case 0: return {{"type", "string"}, {"minLength", pick(rng, 0, 2)}, {"maxLength", pick(rng, 2, 8)}};
    case 1: return {{"type", "integer"}};
    case 2: return {{"type", "number"}};
    case 3: return {{"type", "boolean"}};
    case 4: return {{"type", "null"}};
    case 5: return {{"enum", json::array({"red", "green", "gr\u00fcn", 1, 12, nullptr})}};
    case 6: return {{"type", json::array({"string", "null"})}, {"maxLength", pick(rng, 1, 5)}};
    case 7:
      return {{"type", "array"}, {"items", random_schema(rng, depth + 1)}, {"minItems", pick(rng, 0, 1)},
              {"maxItems", pick(rng, 1, 3)}};
    default: {
      json properties = json::object(), required = json::array();
      const int n = pick(rng, 1, 4);
      for (int i = 0; i < n; ++i) {
        const std::string name = "k" + std::string(1, static_cast<char>('a' + i)) + (pick(rng, 0, 1) ? "_key" : "");
        properties[name] = random_schema(rng, depth + 1);
        if (pick(rng, 0, 3) > 0) required.push_back(name);
      }
      return {{"type", "object"}, {"properties", properties}, {"required", required}, {"additionalProperties", false}};
    }
  }
}

std::string random_document(std::mt19937& rng, const json& schema) {
  if (schema.contains("enum")) {
    const json& values = schema["enum"];
    return values[pick(rng, 0, static_cast<int>(values.size()) - 1)].dump();
  }
  std::string type = schema["type"].is_array() ? schema["type"][pick(rng, 0, 1)].get<std::string>()
                                               : schema["type"].get<std::string>();
  if (type == "string") {
    static const char* pieces[] = {"a", "Z", "\\n", "\\\"", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", " ", "7"};
    const int n = pick(rng, schema.value("minLength", 0), schema.value("maxLength", 8));
    std::string s = "\"";
    for (int i = 0; i < n; ++i) s += pieces[pick(rng, 0, 8)];
    return s + "\"";
  }
  if (type == "integer") return std::to_string(pick(rng, -100000, 100000));
  if (type == "number") return pick(rng, 0, 1) ? "-0.25" : std::to_string(pick(rng, 0, 99)) + ".5e" + std::to_string(pick(rng, 0, 9));
  if (type == "boolean") return pick(rng, 0, 1) ? "true" : "false";
  if (type == "null") return "null";
  if (type == "array") {
    const int n = pick(rng, schema["minItems"].get<int>(), schema["maxItems"].get<int>());
    std::string s = "[";
    for (int i = 0; i < n; ++i) s += (i ? "," : "") + random_document(rng, schema["items"]);
    return s + "]";
  }
  std::string s = "{";
  bool first = true;
  for (const auto& [name, sub] : schema["properties"].items()) {
    bool required = false;
    for (const json& r : schema["required"]) required = required || r == name;
    if (!required && pick(rng, 0, 1)) continue;
    s += (first ? "\"" : ",\"") + name + "\":" + random_document(rng, sub);
    first = false;
  }
  return s + "}";
}

}  // namespace moeserve::testing
