// JSON-lines files: one JSON value per non-blank line; errors name the file and line.
#pragma once

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "util/error.h"

namespace moeserve::eval {

// Calls on_row(const nlohmann::json&, size_t line_number) for each non-blank line.
template <typename OnRow>
void for_each_json_line(const std::string& path, OnRow&& on_row) {
  std::ifstream in(path);
  MOESERVE_CHECK(in.good(), "cannot open {}: {}", path, std::strerror(errno));
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      on_row(nlohmann::json::parse(line), number);
    } catch (const std::exception& e) {
      fail("{}:{}: {}", path, number, e.what());
    }
  }
}

}  // namespace moeserve::eval
