// What the structured-output tests share: an independent JSON schema validator for the subset constrained
// decoding supports (written from the JSON Schema validation spec, not from the matcher), bounded random schemas
// of that subset, and random documents that satisfy them.
#pragma once

#include <nlohmann/json.hpp>

#include <random>
#include <string>

namespace moeserve::testing {

// Whether `value` satisfies `schema`: type (or a list of types), properties / required / additionalProperties,
// items / minItems / maxItems, minLength / maxLength (in code points), enum, const.
bool validates(const nlohmann::json& value, const nlohmann::json& schema);

// A random schema whose documents are bounded in size (depth <= 3, short strings, few items): objects with
// 1-4 properties (some optional), arrays, strings, integers, numbers, booleans, nulls, enums (with values that
// are prefixes of others, such as 1 and 12), and ["string", "null"].
nlohmann::json random_schema(std::mt19937& rng, int depth = 0);

// A random document of the schema, written compactly (the form constrained decoding produces).
std::string random_document(std::mt19937& rng, const nlohmann::json& schema);

}  // namespace moeserve::testing
