// JSON text from files and fields parsed into a DOM with a nesting limit, so that input nested a million levels
// deep is an error instead of a stack overflow later (copying, dumping or comparing a DOM recurses once per
// level). Every failure is an Error that names `where` and the path of the value being read
// ("config.json: rope_scaling.factor: number overflow parsing '1e400' (line 3, column 20)").
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace moeserve {

// Deeper than any configuration file or dataset row moeserve reads (those nest a few levels).
inline constexpr int kMaxJsonDepth = 64;

nlohmann::json parse_json(std::string_view text, const std::string& where, int max_depth = kMaxJsonDepth);

// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
std::string json_error_detail(const nlohmann::json::exception& e);

}  // namespace moeserve
