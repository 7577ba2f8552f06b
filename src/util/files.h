// Small file helpers with errors that name the path.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <span>
#include <string>

namespace moeserve {

// Reads at most max_bytes (bounded_read.h): more is an error naming the path and the limit.
std::string read_text_file(const std::string& path, uint64_t max_bytes = std::numeric_limits<uint64_t>::max());
// Configuration files (config.json, generation_config.json, dtypes.json, a draft head's config.json) are a few
// KiB; a safetensors index of the largest checkpoints a few MiB.
inline constexpr uint64_t kMaxConfigJsonBytes = uint64_t{16} << 20;
// Parsed with the nesting limit of json_parse.h; errors name the path and the value's path.
nlohmann::json read_json_file(const std::string& path, uint64_t max_bytes = kMaxConfigJsonBytes);
void write_file(const std::string& path, std::span<const uint8_t> bytes);
void write_text_file(const std::string& path, const std::string& text);
bool file_exists(const std::string& path);

// Hex SHA-256 of a file's bytes and of a byte range.
std::string sha256_file(const std::string& path);
std::string sha256_hex(std::span<const uint8_t> bytes);

}  // namespace moeserve
