// LoadGen's mlperf_log_accuracy.json: one record per logged sample, {seq_id, qsl_idx, data, token_count,
// [token_data]}, where data is the response's bytes in hex — for LLMs little-endian int32 token ids — and
// token_data, in streaming scenarios, the first token reported on its own.
//
// Read as MLPerf's scripts read it (compliance/TEST09/run_verification.py parse_mlperf_log): a JSON array; if
// the file is not one, JSON lines, or several objects concatenated on a line.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace moeserve::eval {

struct AccuracyLogEntry {
  int64_t seq_id = 0;
  int64_t qsl_idx = 0;
  std::string data;  // hex
  std::optional<int64_t> token_count;
  std::optional<std::string> token_data;  // hex
};

// An Error names the file and, for a bad record, its position.
std::vector<AccuracyLogEntry> read_accuracy_log(const std::string& path);

// Hex to little-endian int32 values (bytes.fromhex, then struct '<i'). Whitespace between bytes is allowed, as
// bytes.fromhex allows it. Trailing bytes that do not fill a value are an Error unless ignore_partial, as
// TEST09's decoder ignores them.
std::vector<int32_t> hex_to_int32(std::string_view hex, bool ignore_partial = false);
// Upper-case hex of the values' little-endian bytes, as LoadGen writes it.
std::string int32_to_hex(std::span<const int32_t> values);

// A log record as LoadGen writes it, for tools and tests that make logs.
std::string accuracy_log_record(int64_t seq_id, int64_t qsl_idx, std::span<const int32_t> tokens,
                                std::optional<std::span<const int32_t>> first_tokens = std::nullopt);

}  // namespace moeserve::eval
