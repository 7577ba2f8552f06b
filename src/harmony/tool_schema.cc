#include "harmony/tool_schema.h"

#include <set>
#include <vector>

namespace moeserve::harmony {
namespace {

using nlohmann::ordered_json;

bool is_enum(const ordered_json& schema) {
  return schema.contains("enum") && schema["enum"].is_array() && !schema["enum"].empty();
}

const std::string* string_field(const ordered_json& schema, const char* key) {
  if (!schema.is_object() || !schema.contains(key) || !schema[key].is_string()) return nullptr;
  return &schema[key].get_ref<const std::string&>();
}

// A default value as harmony prints it beside a property: strings in quotes unless the property is an enum
// (whose values are already quoted in the type), everything else as compact JSON.
std::string default_text(const ordered_json& value, const ordered_json& owner) {
  if (value.is_string()) {
    const std::string& s = value.get_ref<const std::string&>();
    return is_enum(owner) ? s : "\"" + s + "\"";
  }
  return value.dump();
}

// Rust's str::lines(): split at \n, no final empty line.
std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out.push_back(line);
    start = end + 1;
  }
  return out;
}

std::string with_nullable(std::string type, const ordered_json& schema) {
  const bool nullable = schema.is_object() && schema.contains("nullable") && schema["nullable"].is_boolean() &&
                        schema["nullable"].get<bool>();
  if (nullable && type.find("null") == std::string::npos) type += " | null";
  return type;
}

std::string top_level_one_of(const ordered_json& variants, const std::string& indent) {
  std::string out;
  for (const ordered_json& variant : variants) {
    out += "\n" + indent + " | " + with_nullable(schema_to_typescript(variant, indent + "   "), variant);
    std::vector<std::string> comments;
    if (const std::string* d = string_field(variant, "description")) comments.push_back(*d);
    if (variant.is_object() && variant.contains("default")) {
      const ordered_json& value = variant["default"];
      // Here an enum's string default is printed as JSON (harmony formats the value itself).
      comments.push_back("default: " + (value.is_string() && !is_enum(variant) ? "\"" + value.get<std::string>() + "\""
                                                                                : value.dump()));
    }
    if (!comments.empty()) out += " // " + join(comments, " ");
  }
  return out;
}

std::string property_one_of(const std::string& key, const ordered_json& property, bool required,
                            const std::string& indent) {
  const ordered_json& variants = property["oneOf"];
  const std::string* property_description = string_field(property, "description");
  const std::string* first_description = variants.empty() ? nullptr : string_field(variants[0], "description");
  const bool skip_description =
      property_description != nullptr && first_description != nullptr && *property_description == *first_description;
  std::string out;
  const bool description_above = property_description != nullptr && !skip_description;
  if (description_above) out += indent + "// " + *property_description + "\n";
  if (property.contains("default")) out += indent + "// default: " + default_text(property["default"], property) + "\n";
  out += indent + key + (required ? "" : "?") + ":\n";
  for (size_t i = 0; i < variants.size(); ++i) {
    const ordered_json& variant = variants[i];
    out += indent + " | " + with_nullable(schema_to_typescript(variant, indent + "   "), variant);
    std::vector<std::string> comments;
    const std::string* d = string_field(variant, "description");
    if (!(i == 0 && description_above) && d != nullptr &&
        (property_description == nullptr || *d != *property_description)) {
      comments.push_back(*d);
    }
    if (variant.is_object() && variant.contains("default")) {
      comments.push_back("default: " + default_text(variant["default"], variant));
    }
    if (!comments.empty()) out += " // " + join(comments, " ");
    out += "\n";
  }
  return out + indent + ",\n";
}

std::string object_type(const ordered_json& schema, const std::string& indent) {
  std::string out;
  if (const std::string* d = string_field(schema, "description")) out += indent + "// " + *d + "\n";
  out += "{\n";
  if (schema.contains("properties") && schema["properties"].is_object()) {
    std::set<std::string> required;
    if (schema.contains("required") && schema["required"].is_array()) {
      for (const ordered_json& r : schema["required"]) {
        if (r.is_string()) required.insert(r.get<std::string>());
      }
    }
    for (const auto& [key, property] : schema["properties"].items()) {
      if (const std::string* title = string_field(property, "title")) {
        out += indent + "// " + *title + "\n" + indent + "//\n";
      }
      const bool one_of = property.is_object() && property.contains("oneOf") && property["oneOf"].is_array();
      const std::string* description = string_field(property, "description");
      if (!one_of && description != nullptr) out += indent + "// " + *description + "\n";
      if (property.is_object() && property.contains("examples") && property["examples"].is_array() &&
          !property["examples"].empty()) {
        out += indent + "// Examples:\n";
        for (const ordered_json& example : property["examples"]) {
          if (example.is_string()) out += indent + "// - \"" + example.get<std::string>() + "\"\n";
        }
      }
      if (one_of) {
        out += property_one_of(key, property, required.contains(key), indent);
        continue;
      }
      out += indent + key + (required.contains(key) ? "" : "?") + ": ";
      out += with_nullable(schema_to_typescript(property, indent + "    "), property) + ",";
      if (property.is_object() && property.contains("default")) {
        out += " // default: " + default_text(property["default"], property);
      }
      out += "\n";
    }
  }
  return out + indent + "}";
}

}  // namespace

std::string join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += separator;
    out += parts[i];
  }
  return out;
}

std::string schema_to_typescript(const ordered_json& schema, const std::string& indent) {
  if (!schema.is_object()) return "any";
  if (schema.contains("oneOf") && schema["oneOf"].is_array()) return top_level_one_of(schema["oneOf"], indent);
  if (schema.contains("type") && schema["type"].is_array()) {
    std::vector<std::string> types;
    for (const ordered_json& t : schema["type"]) {
      if (t.is_string()) types.push_back(t == "integer" ? "number" : t.get<std::string>());
    }
    if (!types.empty()) return join(types, " | ");
  }
  const std::string* type = string_field(schema, "type");
  if (type == nullptr) return "any";
  if (*type == "object") return object_type(schema, indent);
  if (*type == "string") {
    std::vector<std::string> values;
    if (is_enum(schema)) {
      for (const ordered_json& v : schema["enum"]) {
        if (v.is_string()) values.push_back("\"" + v.get<std::string>() + "\"");
      }
    }
    return values.empty() ? "string" : join(values, " | ");
  }
  if (*type == "number" || *type == "integer") return "number";
  if (*type == "boolean") return "boolean";
  if (*type == "array") {
    return schema.contains("items") ? schema_to_typescript(schema["items"], indent) + "[]" : "Array<any>";
  }
  return "any";
}

std::string tools_section(const std::map<std::string, ToolNamespace>& tools) {
  std::vector<std::string> sections = {"# Tools"};
  for (const auto& [name, ns] : tools) {
    std::vector<std::string> parts = {"## " + ns.name + "\n"};
    if (ns.description) {
      for (const std::string& line : lines(*ns.description)) parts.push_back(ns.tools.empty() ? line : "// " + line);
    }
    if (!ns.tools.empty()) {
      parts.push_back("namespace " + ns.name + " {\n");
      for (const ToolDescription& tool : ns.tools) {
        for (const std::string& line : lines(tool.description)) parts.push_back("// " + line);
        const std::string params = tool.parameters ? schema_to_typescript(*tool.parameters, "") : "";
        parts.push_back("type " + tool.name + " = (" + (tool.parameters ? "_: " + params : "") + ") => any;\n");
      }
      parts.push_back("} // namespace " + ns.name);
    }
    sections.push_back(join(parts, "\n"));
  }
  return join(sections, "\n\n");
}

}  // namespace moeserve::harmony
