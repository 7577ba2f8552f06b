// Reading fields of a JSON object (config files) with errors that name the file and the field. Values are
// checked, never converted silently: an integer field must hold an integer that fits its type (1.5, 1e20 and
// 4294967297 are errors for an int, not 1, garbage or 1), a bounded field must lie in its range
// ("config.json: num_hidden_layers = 1000000000 is out of range (1..1024)"), a list is checked element by element.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "util/error.h"

namespace moeserve {

// The value as written, shortened for a message.
inline std::string json_excerpt(const nlohmann::json& value) {
  std::string text = value.dump();
  return text.size() <= 80 ? text : text.substr(0, 77) + "...";
}

namespace json_fields_detail {

template <typename T>
struct is_vector : std::false_type {};
template <typename T>
struct is_vector<std::vector<T>> : std::true_type {};

template <typename T>
[[noreturn]] void wrong_type(const nlohmann::json& value, const std::string& where, const std::string& field) {
  const char* expected = std::is_same_v<T, bool>          ? "a boolean"
                         : std::is_same_v<T, std::string> ? "a string"
                         : std::is_integral_v<T>          ? "an integer"
                         : std::is_floating_point_v<T>    ? "a number"
                                                          : "a list";
  fail("{}: \"{}\" has the wrong type ({}); expected {}", where, field, json_excerpt(value), expected);
}

}  // namespace json_fields_detail

// `value` (the field `field` of `where`) as T: bool, std::string, an integer or floating-point type, or a
// std::vector of those.
template <typename T>
T json_value_as(const nlohmann::json& value, const std::string& where, const std::string& field) {
  using namespace json_fields_detail;
  if constexpr (std::is_same_v<T, bool>) {
    if (!value.is_boolean()) wrong_type<T>(value, where, field);
    return value.get<bool>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!value.is_string()) wrong_type<T>(value, where, field);
    return value.get<std::string>();
  } else if constexpr (std::is_integral_v<T>) {
    if (value.is_number_unsigned()) {
      const auto v = value.get<uint64_t>();
      MOESERVE_CHECK(v <= static_cast<uint64_t>(std::numeric_limits<T>::max()), "{}: {} = {} is out of range ({}..{})",
                     where, field, v, std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
      return static_cast<T>(v);
    }
    if (value.is_number_integer()) {
      const auto v = value.get<int64_t>();
      MOESERVE_CHECK(v >= 0 || std::is_signed_v<T>, "{}: {} = {} is out of range ({}..{})", where, field, v,
                     std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
      MOESERVE_CHECK(!std::is_signed_v<T> || (v >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                                              v <= static_cast<int64_t>(std::numeric_limits<T>::max())),
                     "{}: {} = {} is out of range ({}..{})", where, field, v, std::numeric_limits<T>::min(),
                     std::numeric_limits<T>::max());
      return static_cast<T>(v);
    }
    if (value.is_number_float()) {
      // An integer too large for JSON's 64 bits arrives as a double (1e20); a fraction is not an integer.
      const double v = value.get<double>();
      const bool beyond = !(v >= static_cast<double>(std::numeric_limits<T>::min()) &&
                            v <= static_cast<double>(std::numeric_limits<T>::max()));
      MOESERVE_CHECK(!beyond || std::floor(v) != v, "{}: {} = {} is out of range ({}..{})", where, field,
                     json_excerpt(value), std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
      fail("{}: {} = {} is not an integer", where, field, json_excerpt(value));
    }
    wrong_type<T>(value, where, field);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!value.is_number()) wrong_type<T>(value, where, field);
    const double v = value.get<double>();
    MOESERVE_CHECK(std::isfinite(v) && std::abs(v) <= static_cast<double>(std::numeric_limits<T>::max()),
                   "{}: {} = {} is out of range", where, field, json_excerpt(value));
    return static_cast<T>(v);
  } else {
    static_assert(is_vector<T>::value, "json_value_as: unsupported type");
    if (!value.is_array()) wrong_type<T>(value, where, field);
    T out;
    out.reserve(value.size());
    for (size_t i = 0; i < value.size(); ++i)
      out.push_back(json_value_as<typename T::value_type>(value[i], where, field + "[" + std::to_string(i) + "]"));
    return out;
  }
}

template <typename T>
T required_field(const nlohmann::json& j, const char* key, const std::string& where) {
  MOESERVE_CHECK(j.is_object(), "{}: not a JSON object", where);
  MOESERVE_CHECK(j.contains(key), "{}: missing \"{}\"", where, key);
  return json_value_as<T>(j.at(key), where, key);
}

// `fallback` when the field is absent or null.
template <typename T>
T optional_field(const nlohmann::json& j, const char* key, T fallback, const std::string& where) {
  MOESERVE_CHECK(j.is_object(), "{}: not a JSON object", where);
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  return json_value_as<T>(j.at(key), where, key);
}

// A number that must lie in [lo, hi].
template <typename T>
T in_range(T value, T lo, T hi, const std::string& where, const char* key) {
  static_assert(std::is_arithmetic_v<T>);
  MOESERVE_CHECK(value >= lo && value <= hi, "{}: {} = {} is out of range ({}..{})", where, key, value, lo, hi);
  return value;
}
template <typename T>
T required_field(const nlohmann::json& j, const char* key, const std::string& where, T lo, T hi) {
  return in_range(required_field<T>(j, key, where), lo, hi, where, key);
}

}  // namespace moeserve
