// JSON-lines files: one JSON value per non-blank line; errors name the file and line. Lines and files are read
// within stated bounds (bounded_read.h) and each line is parsed with the nesting limit of json_parse.h.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "util/bounded_read.h"
#include "util/error.h"
#include "util/json_parse.h"

namespace moeserve::eval {

// The evaluation sets' rows are questions of a few KiB; LiveCodeBench's rows carry their tests and pass their
// own, larger bounds.
struct JsonLinesLimits {
  uint64_t max_line_bytes = 64 * kMiB;
  uint64_t max_file_bytes = 4 * kGiB;
};

// Calls on_row(const nlohmann::json&, size_t line_number) for each non-blank line.
template <typename OnRow>
void for_each_json_line(const std::string& path, OnRow&& on_row, const JsonLinesLimits& limits = {}) {
  LineReader lines(path, limits.max_line_bytes, limits.max_file_bytes);
  for (std::string line; lines.next(line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", path, lines.line_number());
    const nlohmann::json row = parse_json(line, where);
    try {
      on_row(row, lines.line_number());
    } catch (const nlohmann::json::exception& e) {
      fail("{}: {}", where, json_error_detail(e));  // a row read with nlohmann's own accessors
    } catch (const std::exception& e) {
      fail("{}: {}", where, e.what());
    }
  }
}

}  // namespace moeserve::eval
