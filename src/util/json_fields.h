// Reading fields of a JSON object (config files) with errors that name the file and the field.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "util/error.h"

namespace moeserve {

template <typename T>
T required_field(const nlohmann::json& j, const char* key, const std::string& where) {
  MOESERVE_CHECK(j.contains(key), "{}: missing \"{}\"", where, key);
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("{}: \"{}\" has the wrong type ({})", where, key, j.at(key).dump());
  }
}

// `fallback` when the field is absent or null.
template <typename T>
T optional_field(const nlohmann::json& j, const char* key, T fallback, const std::string& where) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  return required_field<T>(j, key, where);
}

}  // namespace moeserve
