#include "eval/accuracy_log.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sstream>

#include "util/error.h"
#include "util/files.h"

namespace moeserve::eval {
namespace {

AccuracyLogEntry entry_from_json(const nlohmann::json& record, size_t position) {
  MOESERVE_CHECK(record.is_object(), "record {} is not a JSON object", position);
  AccuracyLogEntry e;
  try {
    e.qsl_idx = record.at("qsl_idx").get<int64_t>();
    e.seq_id = record.value("seq_id", int64_t{0});
    e.data = record.value("data", std::string());
    if (record.contains("token_count") && !record["token_count"].is_null()) {
      e.token_count = record["token_count"].get<int64_t>();
    }
    if (record.contains("token_data") && record["token_data"].is_string()) {
      e.token_data = record["token_data"].get<std::string>();
    }
  } catch (const nlohmann::json::exception& error) {
    fail("record {}: {}", position, error.what());
  }
  return e;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::vector<AccuracyLogEntry> read_accuracy_log(const std::string& path) {
  const std::string text = read_text_file(path);
  std::vector<AccuracyLogEntry> entries;
  try {
    const nlohmann::json whole = nlohmann::json::parse(text, nullptr, false);
    if (!whole.is_discarded() && whole.is_array()) {
      for (size_t i = 0; i < whole.size(); ++i) entries.push_back(entry_from_json(whole[i], i));
      return entries;
    }
    // JSON lines, or objects one after another: read values until the text runs out.
    std::istringstream in(text);
    while (in >> std::ws && in.peek() != EOF) {
      nlohmann::json record;
      in >> record;
      entries.push_back(entry_from_json(record, entries.size()));
    }
  } catch (const std::exception& e) {
    fail("{}: not an MLPerf accuracy log: {}", path, e.what());
  }
  return entries;
}

std::vector<int32_t> hex_to_int32(std::string_view hex, bool ignore_partial) {
  std::vector<uint8_t> bytes;
  bytes.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size();) {
    if (hex[i] == ' ' || hex[i] == '\t' || hex[i] == '\n' || hex[i] == '\r') {
      ++i;
      continue;
    }
    const int high = hex_digit(hex[i]);
    const int low = i + 1 < hex.size() ? hex_digit(hex[i + 1]) : -1;
    MOESERVE_CHECK(high >= 0 && low >= 0, "non-hexadecimal number found in the data at position {}", i);
    bytes.push_back(static_cast<uint8_t>(high * 16 + low));
    i += 2;
  }
  MOESERVE_CHECK(ignore_partial || bytes.size() % 4 == 0, "the data has {} bytes, not a whole number of int32 tokens",
                 bytes.size());
  std::vector<int32_t> values(bytes.size() / 4);
  for (size_t v = 0; v < values.size(); ++v) {
    uint32_t u = 0;
    for (int b = 0; b < 4; ++b) u |= static_cast<uint32_t>(bytes[4 * v + b]) << (8 * b);
    values[v] = static_cast<int32_t>(u);
  }
  return values;
}

std::string int32_to_hex(std::span<const int32_t> values) {
  std::string hex;
  hex.reserve(values.size() * 8);
  for (int32_t value : values) {
    const auto u = static_cast<uint32_t>(value);
    for (int b = 0; b < 4; ++b) hex += fmt::format("{:02X}", (u >> (8 * b)) & 0xFF);
  }
  return hex;
}

std::string accuracy_log_record(int64_t seq_id, int64_t qsl_idx, std::span<const int32_t> tokens,
                                std::optional<std::span<const int32_t>> first_tokens) {
  // LoadGen's order (loadgen/logging.cc AsyncLog::LogAccuracy): seq_id, qsl_idx, data, [token_data], token_count.
  nlohmann::ordered_json record = {{"seq_id", seq_id}, {"qsl_idx", qsl_idx}, {"data", int32_to_hex(tokens)}};
  if (first_tokens) record["token_data"] = int32_to_hex(*first_tokens);
  record["token_count"] = tokens.size();
  return record.dump();
}

}  // namespace moeserve::eval
