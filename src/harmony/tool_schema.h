// The tools section of system and developer messages: each tool namespace as harmony renders it, function
// parameters as a TypeScript-like type made from their JSON schema (openai/harmony src/encoding.rs @ec7606d,
// json_schema_to_typescript and template_tools_section).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "harmony/message.h"

namespace moeserve::harmony {

// Parts joined by a separator (Rust's [String]::join).
std::string join(const std::vector<std::string>& parts, std::string_view separator);

std::string schema_to_typescript(const nlohmann::ordered_json& schema, const std::string& indent);

// "# Tools\n\n## browser\n\n..." for the namespaces in name order.
std::string tools_section(const std::map<std::string, ToolNamespace>& tools);

}  // namespace moeserve::harmony
